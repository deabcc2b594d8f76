//! scb's HTTP/1.1 connection driver.
//!
//! Why our own and not hyper's: hyper cannot send a file descriptor, so a response body
//! that is a [`FileRegion`](crate::FileRegion) could never go out with `sendfile(2)`; and
//! hyper answers malformed or oversized heads itself, without the request id every scb
//! response carries. The driver is deliberately small: it parses heads (`head`), decodes
//! bodies (`body`, `chunked`), encodes response heads (`encode`) and loops. Pipelined
//! responses are batched into one write. Anything outside HTTP/1.1 (the HTTP/2 preface, an
//! upgrade or CONNECT) is handed to hyper with the bytes already read.
//!
//! One driver for every transport: plain TCP and TLS (any [`Transport`]) get the same
//! parsing, limits and answers; only a file region's `sendfile` needs the TCP socket
//! itself, and over TLS the region is read and written like any body.

use std::any::Any;
use std::pin::{Pin, pin};
use std::rc::Rc;
use std::task::Poll;

use bytes::{Bytes, BytesMut};
use http::{Method, Request, Response, StatusCode, Version};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::sync::futures::OwnedNotified;
use tokio::time::{Instant, Sleep};
use tower::Service;

use super::body::{DISCARD_MAX, Feeder};
use super::encode::{self, Framing, RequestInfo};
use super::head::{self, BodyFraming, HeadError, HeadLimits, Scratch};
use super::service::{ConnService, ResponseBody};
use super::{ConnCtx, call_service, error_response};
use super::{Peer, hyper};
use crate::server::io::{Rewind, Transport, write_all_progress, write_all_vectored};
use crate::server::sys;
use crate::{Body, BoxError};

/// The HTTP/2 connection preface (RFC 9113 §3.4).
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Its first line: what only an HTTP/2 client sends.
const H2_PREFACE_LINE: &[u8] = b"PRI * HTTP/2.0\r\n";

/// Output is gathered up to this size before a write; pipelined responses and small bodies
/// share one `write` with their heads.
const WRITE_BUFFER: usize = 64 * 1024;

/// Body frames up to this size are copied behind their head; larger ones are written from
/// their own buffer, together with what is buffered, by one `writev` (a cached file's
/// bytes are never copied). One syscall either way: below this size the copy costs less
/// than the second iovec's bookkeeping.
const COPY_MAX: usize = 512;

/// What a connection's read and write buffers are given when it has a request to read or
/// a response to write. An idle keep-alive connection on a crowded worker holds neither
/// (see `Conn::read_more`).
const BUFFER: usize = 8 * 1024;

/// A worker with more connections open than this gives the buffers of its idle
/// keep-alive connections back (`Conn::read_more`). Below it they stay: 256 connections'
/// buffers are 4 MiB, and giving them back and taking them again costs a busy
/// keep-alive connection about 1,100 instructions a request (bench/RESULTS.md).
const KEEP_IDLE_BUFFERS_UP_TO: usize = 256;

/// How often an idle keep-alive connection holding its buffers asks whether its worker
/// has become crowded since the wait began (then gives them back), and how long one
/// holding none waits in its task before it is parked (`serve`'s `park`): a busy
/// keep-alive client's next request comes within it, and resuming a parked connection
/// costs a task (about 3,600 instructions, bench/RESULTS.md), while the memory it saves
/// is that of connections idle for longer.
const IDLE_CHECK: std::time::Duration = std::time::Duration::from_secs(1);

/// How long, and how much, to keep reading after deciding to close a connection whose
/// client may still be sending: closing with unread input makes the kernel send RST, which
/// can destroy the response the client has not read yet.
const LINGER_TIME: std::time::Duration = std::time::Duration::from_secs(2);
const LINGER_BYTES: usize = 1 << 20;

/// How the HTTP/1.1 part of a connection ended.
enum Outcome<T> {
    Closed,
    Http2(Rewind<T>),
    Upgrade(Rewind<T>),
}

struct Conn<'a, T> {
    io: T,
    rbuf: BytesMut,
    wbuf: Vec<u8>,
    ctx: &'a ConnCtx,
    /// One timer for the connection's whole life, for both the idle and the head
    /// deadline. It is moved only when a deadline must come sooner, or when it fires
    /// before the deadline now wanted: a keep-alive request costs no timer-wheel insert.
    timer: Pin<Box<Sleep>>,
    /// Completes when the server begins shutting down.
    shutdown: Pin<Box<OwnedNotified>>,
    /// Where the socket stands with Nagle's algorithm ([`Conn::before_write`]).
    nagle: Nagle,
}

/// Nagle's algorithm on a plain socket, turned off (`TCP_NODELAY`) before the
/// connection's second write, as nginx does when a connection is kept alive: a first
/// write is never held (nothing of the connection is unacknowledged yet), so a
/// connection that answers one request in one write and closes, the shape of clients
/// that do not keep connections, spends no system call on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Nagle {
    /// Nothing written yet.
    BeforeFirstWrite,
    /// Written once: `TCP_NODELAY` goes on before the next write.
    AfterFirstWrite,
    /// `TCP_NODELAY` is on, or is not this driver's business (TLS sets it before its
    /// handshake).
    Off,
}

/// An idle keep-alive connection [`serve`] hands back to be parked.
#[derive(Debug)]
pub(crate) struct Parkable<T> {
    pub(crate) io: T,
    /// When it is to be closed if no request comes first.
    pub(crate) keep_alive_until: Instant,
}

/// How a connection comes to [`serve`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Start {
    /// Just accepted (or secured): its first head's deadline runs from accept, and with
    /// `detect_h2` it may open with the HTTP/2 preface.
    New { detect_h2: bool },
    /// A keep-alive connection its worker parked between requests (see
    /// [`serve`]'s `park`), whose socket has become readable.
    Resumed,
}

/// Serves HTTP/1.1 on `io` until the connection ends, then hands to hyper what leaves
/// HTTP/1.1: with `detect_h2`, a connection that opens with the HTTP/2 preface (h2c with
/// prior knowledge, on a plain listener; over TLS, ALPN decides instead), and an upgrade
/// or CONNECT. hyper's connection futures are boxed: inline, they would make every
/// connection's future as large as theirs. The service is lent, and cloned only for
/// hyper, which owns the service it drives.
///
/// The requests are served by a boxed future of their own ([`serve_requests`]: it holds
/// the service's and the response's futures, kilobytes), which on a crowded worker ends
/// when the connection goes idle: what waits for the next request is then this small
/// future and the connection's state without its buffers (see [`Conn::read_more`]). With
/// `park`, a connection still idle after [`IDLE_CHECK`] is returned (Nagle off, no
/// buffer, no timer): the caller parks it with its worker, which keeps no task for it and
/// serves it again from [`Start::Resumed`] when its socket becomes readable. Returns
/// `None` when the connection is done.
///
/// Not an `async fn`: its future would hold the transport twice (the argument, and the
/// connection's state made from it). The state is made first and the `async` block holds
/// it once.
pub(crate) fn serve<'a, T, S, B>(
    io: T,
    start: Start,
    park: bool,
    peer: &'a Peer,
    svc: &'a mut S,
    ctx: &'a Rc<ConnCtx>,
) -> impl Future<Output = Option<Parkable<T>>> + 'a
where
    T: Transport + Send + 'static,
    S: ConnService<B>,
    B: ResponseBody,
{
    let (deadline, detect_h2, first, wbuf) = match start {
        // The first request's head deadline runs from accept: a client that connects and
        // sends nothing is a slowloris too.
        Start::New { detect_h2 } => (
            Some(Instant::now() + ctx.limits.header_read_timeout),
            detect_h2,
            true,
            Vec::with_capacity(BUFFER),
        ),
        // Between requests; the write buffer is taken with the first response.
        Start::Resumed => (None, false, false, Vec::new()),
    };
    let timer_at = deadline.unwrap_or_else(|| Instant::now() + ctx.limits.keep_alive_timeout);
    // A resumed connection was parked with Nagle off.
    let nagle = if matches!(start, Start::New { .. }) && io.plain_socket().is_some() {
        Nagle::BeforeFirstWrite
    } else {
        Nagle::Off
    };
    let mut conn = Conn {
        io,
        rbuf: BytesMut::with_capacity(BUFFER),
        wbuf,
        ctx,
        timer: Box::pin(tokio::time::sleep_until(timer_at)),
        shutdown: Box::pin(ctx.shutdown.notified()),
        nagle,
    };
    let mut between = Between {
        deadline,
        first,
        scratch: Scratch::default(),
    };
    async move {
        let outcome = loop {
            let served = Box::pin(serve_requests(
                &mut conn,
                &mut between,
                detect_h2,
                peer,
                &mut *svc,
            ))
            .await;
            match served {
                Ok(Served::Closed) => break Ok(Outcome::Closed),
                // hyper's HTTP/2 and upgraded connections write frame after frame.
                Ok(Served::Http2(pre)) => {
                    conn.nagle_off();
                    break Ok(Outcome::Http2(Rewind::new(conn.io, pre)));
                }
                Ok(Served::Upgrade(pre)) => {
                    conn.nagle_off();
                    break Ok(Outcome::Upgrade(Rewind::new(conn.io, pre)));
                }
                Ok(Served::Idle) => {
                    // The head's field offsets go with the buffers: a browser's twenty
                    // fields are 640 bytes of them, kept for the next head otherwise.
                    between.scratch = Scratch::default();
                    match conn.wait_bufferless(park).await {
                        Ok(Waited::Input) => {}
                        Ok(Waited::Park { until }) => {
                            conn.nagle_off();
                            return Some(Parkable {
                                io: conn.io,
                                keep_alive_until: until,
                            });
                        }
                        Ok(Waited::Closed | Waited::Crowded) => break Ok(Outcome::Closed),
                        Err(e) => break Err(e),
                    }
                }
                Err(e) => break Err(e),
            }
        };
        match outcome {
            Ok(Outcome::Closed) => {}
            Ok(Outcome::Http2(io)) => {
                Box::pin(hyper::serve_h2(io, peer.clone(), svc.clone(), ctx)).await;
            }
            Ok(Outcome::Upgrade(io)) => {
                Box::pin(hyper::serve_h1(io, peer.clone(), svc.clone(), ctx)).await;
            }
            Err(e) => {
                tracing::debug!(peer = %peer.info.remote, error = %e, "connection ended with an error");
            }
        }
        None
    }
}

/// What [`serve`] keeps of the requests between them.
struct Between {
    /// The deadline of the head being read; `None` between requests.
    deadline: Option<Instant>,
    /// No request has been read yet (the HTTP/2 preface may still come).
    first: bool,
    scratch: Scratch,
}

/// How [`serve_requests`] stopped.
enum Served {
    Closed,
    /// The HTTP/2 preface, with the bytes read so far.
    Http2(Bytes),
    /// An upgrade or CONNECT, with the bytes read past its head.
    Upgrade(Bytes),
    /// Idle on a crowded worker, its buffers given back: wait, then serve again.
    Idle,
}

/// Serves requests on `conn` until the connection ends, leaves HTTP/1.1, or goes idle on
/// a crowded worker.
async fn serve_requests<T, S, B>(
    conn: &mut Conn<'_, T>,
    between: &mut Between,
    detect_h2: bool,
    peer: &Peer,
    svc: &mut S,
) -> std::io::Result<Served>
where
    T: Transport,
    S: Service<Request<Body>, Response = Response<B>>,
    S::Error: Into<BoxError>,
    B: http_body::Body<Data = Bytes> + 'static,
    B::Error: Into<BoxError>,
{
    let ctx = conn.ctx;
    let limits = &ctx.limits;
    let head_limits = HeadLimits {
        max_header_bytes: limits.max_header_bytes,
        max_headers: limits.max_headers,
        max_body_bytes: limits.max_body_bytes,
    };
    let Between {
        deadline,
        first,
        scratch,
    } = between;

    loop {
        // Read one request head.
        let head = loop {
            if !conn.rbuf.is_empty() {
                if *first && detect_h2 && conn.rbuf[0] == H2_PREFACE[0] {
                    let n = conn.rbuf.len().min(H2_PREFACE.len());
                    if conn.rbuf[..n] == H2_PREFACE[..n] {
                        if n == H2_PREFACE.len() {
                            return Ok(Served::Http2(conn.rbuf.split().freeze()));
                        }
                        match conn.read_more(*deadline).await? {
                            Read::Data => {}
                            Read::Closed => return Ok(Served::Closed),
                            Read::Idle => return Ok(Served::Idle),
                        }
                        continue;
                    }
                    // The HTTP/2 preface's request line with a broken remainder: an
                    // HTTP/2 client, which must never get an HTTP/1 answer (RFC 9113
                    // §3.4: an invalid preface ends the connection).
                    if conn.rbuf.starts_with(H2_PREFACE_LINE) {
                        return Ok(Served::Closed);
                    }
                }
                match head::parse(&mut conn.rbuf, head_limits, scratch) {
                    Ok(Some(head)) => break head,
                    Ok(None) => {}
                    Err(e) => {
                        conn.refuse(&e).await;
                        return Ok(Served::Closed);
                    }
                }
                // Part of a head is here: its deadline runs from its first byte.
                deadline.get_or_insert_with(|| Instant::now() + limits.header_read_timeout);
            }
            match conn.read_more(*deadline).await? {
                Read::Data => {}
                Read::Closed => return Ok(Served::Closed),
                Read::Idle => return Ok(Served::Idle),
            }
        };
        *first = false;
        *deadline = None;

        if head.upgrade {
            conn.flush().await?;
            return Ok(Served::Upgrade(head::rejoin(&head.raw, &conn.rbuf)));
        }

        let method = head.parts.method.clone();
        let version = head.parts.version;
        // Read only for a request with a body: a GET pays no clock for it.
        let body_deadline = || Instant::now() + limits.body_read_timeout;
        let (mut feeder, body) = match head.framing {
            BodyFraming::None => (None, Body::empty()),
            BodyFraming::Length(n) => {
                let (f, b) = Feeder::new(
                    Some(n),
                    limits.max_body_bytes,
                    limits.max_header_bytes,
                    body_deadline(),
                );
                (Some(f), Body::new(b))
            }
            BodyFraming::Chunked => {
                let (f, b) = Feeder::new(
                    None,
                    limits.max_body_bytes,
                    limits.max_header_bytes,
                    body_deadline(),
                );
                (Some(f), Body::new(b))
            }
        };
        if head.expect_continue {
            conn.wbuf
                .extend_from_slice(b"HTTP/1.1 100 Continue\r\n\r\n");
            conn.flush().await?;
        }
        let mut req = Request::from_parts(head.parts, body);
        peer.stamp(&mut req);

        // Run the service, feeding the request body while it wants more.
        let mut body_failed = false;
        let result = {
            let mut fut = pin!(call_service(svc, req));
            match &mut feeder {
                None => fut.await,
                Some(feeder) => loop {
                    if feeder.is_finished() {
                        break fut.await;
                    }
                    tokio::select! {
                        biased;
                        res = &mut fut => break res,
                        step = feeder.step(&mut conn.io, &mut conn.rbuf) => {
                            if let Err(e) = step {
                                tracing::debug!(error = %e, "request body failed");
                                feeder.fail(e);
                                body_failed = true;
                            }
                        }
                    }
                },
            }
        };
        // A body not read to its end leaves the stream mid-message: the next request can
        // only follow once the rest is read. A small rest is read and dropped after the
        // response; anything else closes the connection.
        let body_done = feeder.as_ref().is_none_or(Feeder::is_complete) && !body_failed;
        let discard = !body_done
            && !body_failed
            && feeder.as_ref().is_some_and(|f| f.may_discard(DISCARD_MAX));
        if let Some(feeder) = &mut feeder {
            feeder.close_channel();
        }

        let keep_alive = head.keep_alive && (body_done || discard) && !ctx.shutdown.is_fired();
        let info = RequestInfo {
            method: &method,
            version,
            keep_alive,
        };
        let written = match result {
            Ok(res) => conn.write_response(res, info).await,
            Err(failed) => {
                conn.write_response(failed.response(&ctx.request_id_header), info)
                    .await
            }
        };
        let keep_alive = match written {
            Ok(keep_alive) => keep_alive,
            Err(e) => {
                tracing::debug!(error = %e, "response not completed; closing the connection");
                return Ok(Served::Closed);
            }
        };
        if !keep_alive {
            conn.close(!body_done).await;
            return Ok(Served::Closed);
        }
        if let Some(feeder) = feeder.as_mut().filter(|_| !body_done) {
            // The client may hold the rest of its body until it sees the response.
            conn.flush().await?;
            if !feeder
                .discard(&mut conn.io, &mut conn.rbuf, DISCARD_MAX)
                .await
            {
                conn.close(true).await;
                return Ok(Served::Closed);
            }
        }
    }
}

/// What [`Conn::read_more`] found.
enum Read {
    /// More input is in the buffer.
    Data,
    /// The connection is done: closed by the client, timed out, or shutting down.
    Closed,
    /// Idle on a crowded worker, its buffers given back ([`Conn::wait_bufferless`]).
    Idle,
}

/// Whether the worker on this thread has so many connections open that its idle ones give
/// back what they hold.
fn crowded() -> bool {
    crate::server::open_connections::here() > KEEP_IDLE_BUFFERS_UP_TO
}

/// What [`Conn::wait`] waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Until {
    /// The rest of a head, until its deadline.
    Head(Instant),
    /// The next request.
    Idle(IdleWait),
}

/// An idle wait, by what the connection holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum IdleWait {
    /// Its buffers: it looks every [`IDLE_CHECK`] whether its worker has become crowded.
    Buffered,
    /// No buffer; with `park`, it is parked after [`IDLE_CHECK`].
    Bufferless { park: bool },
}

/// What an idle wait looks out for on its timer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Check {
    Crowded,
    ParkAt(Instant),
}

/// How [`Conn::wait`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Waited {
    /// Input (or its end) is there to read.
    Input,
    /// The deadline passed (a head's answered 408), the client closed, or shutdown began.
    Closed,
    /// Idle with its buffers, on a worker that has become crowded.
    Crowded,
    /// Idle without buffers for [`IDLE_CHECK`]: to be parked, and closed `until` its
    /// keep-alive deadline if no request comes.
    Park { until: Instant },
}

/// Whether there is more to read: reads into `rbuf` (false at the end of the stream), or
/// with `readiness_only` waits until the socket under `io` is readable
/// ([`Transport::idle_socket`]). Cancel-safe, as both are.
async fn input<T: Transport>(
    io: &mut T,
    rbuf: &mut BytesMut,
    readiness_only: bool,
) -> std::io::Result<bool> {
    if readiness_only && let Some(socket) = io.idle_socket() {
        std::future::poll_fn(|cx| socket.poll_read_ready(cx)).await?;
        return Ok(true);
    }
    Ok(io.read_buf(rbuf).await? > 0)
}

impl<T: Transport> Conn<'_, T> {
    /// Reads more input. Between requests (`deadline` is `None`) it waits up to the idle
    /// keep-alive timeout and gives way to shutdown; inside a head it waits until the
    /// head's deadline and answers 408 when it passes.
    ///
    /// Between requests on a plain socket (or a TLS session that can wait on its socket,
    /// [`Transport::idle_socket`]) of a worker with many connections open, a
    /// connection whose client has sent nothing yet gives its buffers back and says
    /// [`Read::Idle`]: its requests' future ends, and [`serve`] waits for the socket
    /// holding no buffer ([`Self::wait_bufferless`]). A keep-alive client may stay silent
    /// for the whole keep-alive timeout, and ten thousand of them would otherwise hold
    /// 16 KiB of buffers and a request's future each (nginx's idle connections hold
    /// neither). The read attempted first keeps this off the path of a client whose next
    /// request is already there, and clears the socket's readiness so that the wait is a
    /// real one. A connection that began its wait holding its buffers (its worker was not
    /// crowded then) gives them back too if the worker becomes crowded while it waits.
    async fn read_more(&mut self, deadline: Option<Instant>) -> std::io::Result<Read> {
        self.flush().await?;
        self.rbuf.reserve(BUFFER);
        let idle = deadline.is_none();
        if idle && self.ctx.shutdown.is_fired() {
            return Ok(Read::Closed);
        }
        if idle && self.rbuf.is_empty() && self.io.idle_socket().is_some() && crowded() {
            let mut read = pin!(self.io.read_buf(&mut self.rbuf));
            let mut now = std::task::Context::from_waker(std::task::Waker::noop());
            if let Poll::Ready(read) = read.as_mut().poll(&mut now) {
                return Ok(if read? > 0 { Read::Data } else { Read::Closed });
            }
            return Ok(self.give_buffers_back());
        }
        let until = match deadline {
            Some(deadline) => Until::Head(deadline),
            None => Until::Idle(IdleWait::Buffered),
        };
        Ok(match self.wait(until).await? {
            Waited::Input => Read::Data,
            // Its worker became crowded while it waited.
            Waited::Crowded => self.give_buffers_back(),
            Waited::Closed | Waited::Park { .. } => Read::Closed,
        })
    }

    /// An idle connection's buffers given back: [`Read::Idle`].
    fn give_buffers_back(&mut self) -> Read {
        self.rbuf = BytesMut::new();
        self.wbuf = Vec::new();
        Read::Idle
    }

    /// Waits, holding no buffer, until an idle connection's socket is readable (and the
    /// read buffer has room again), the keep-alive timeout passes or shutdown begins; with
    /// `park`, at most [`IDLE_CHECK`], after which the connection is to be parked.
    async fn wait_bufferless(&mut self, park: bool) -> std::io::Result<Waited> {
        let waited = self
            .wait(Until::Idle(IdleWait::Bufferless { park }))
            .await?;
        if waited == Waited::Input {
            self.rbuf.reserve(BUFFER);
        }
        Ok(waited)
    }

    /// Waits for [`input`] until a head's deadline (then answers 408), or between
    /// requests until the keep-alive timeout, shutdown, or what `IdleWait` looks out for.
    ///
    /// One timer serves all of it: moved only when a deadline must come sooner or when it
    /// fires before the one wanted now, so a keep-alive request costs no timer-wheel
    /// insert; an idle wait's checks make it fire every [`IDLE_CHECK`] instead of once a
    /// keep-alive timeout.
    async fn wait(&mut self, until: Until) -> std::io::Result<Waited> {
        let (wanted, check, readiness_only, now) = match until {
            Until::Head(deadline) => (deadline, None, false, None),
            Until::Idle(idle) => {
                let now = Instant::now();
                let wanted = now + self.ctx.limits.keep_alive_timeout;
                let (check, readiness_only) = match idle {
                    // Only a connection that could give its buffers back looks.
                    IdleWait::Buffered if self.io.idle_socket().is_some() => {
                        (Some(Check::Crowded), false)
                    }
                    IdleWait::Buffered => (None, false),
                    IdleWait::Bufferless { park: true } => {
                        (Some(Check::ParkAt(now + IDLE_CHECK)), true)
                    }
                    IdleWait::Bufferless { park: false } => (None, true),
                };
                (wanted, check, readiness_only, Some(now))
            }
        };
        let next = |now: Instant| match check {
            None => wanted,
            Some(Check::Crowded) => wanted.min(now + IDLE_CHECK),
            Some(Check::ParkAt(at)) => wanted.min(at),
        };
        // The clock is read once a wait, and a head's wait reads none.
        let first = now.map_or(wanted, next);
        if first < self.timer.deadline() {
            self.timer.as_mut().reset(first);
        }
        let idle = matches!(until, Until::Idle(_));
        loop {
            tokio::select! {
                biased;
                read = input(&mut self.io, &mut self.rbuf, readiness_only) => {
                    return Ok(if read? { Waited::Input } else { Waited::Closed });
                }
                () = self.timer.as_mut() => {
                    let now = Instant::now();
                    if now < wanted {
                        match check {
                            Some(Check::Crowded) if crowded() => return Ok(Waited::Crowded),
                            Some(Check::ParkAt(at)) if now >= at => {
                                return Ok(Waited::Park { until: wanted });
                            }
                            // Fired for an earlier deadline, or nothing to do yet.
                            _ => {}
                        }
                        self.timer.as_mut().reset(next(now));
                        continue;
                    }
                }
                () = self.shutdown.as_mut(), if idle => return Ok(Waited::Closed),
            }
            // The deadline passed.
            if !idle {
                let e = HeadError {
                    status: StatusCode::REQUEST_TIMEOUT,
                    reason: "request head not received in time",
                };
                // Boxed: an answer's future inline would make every idle connection's
                // wait as large as a response's.
                Box::pin(self.refuse(&e)).await;
            }
            return Ok(Waited::Closed);
        }
    }

    /// Answers a refused head and closes the connection.
    async fn refuse(&mut self, e: &HeadError) {
        tracing::debug!(status = %e.status, reason = e.reason, "refused request");
        let res = error_response(e.status, e.reason, &self.ctx.request_id_header, true);
        self.ctx.count_answer(None, &res);
        let info = RequestInfo {
            method: &Method::GET,
            version: Version::HTTP_11,
            keep_alive: false,
        };
        if self.write_response(res, info).await.is_ok() {
            self.close(true).await;
        }
    }

    /// Called before each write: from the connection's second write on, Nagle is off
    /// (see [`Nagle`]).
    fn before_write(&mut self) {
        match self.nagle {
            Nagle::BeforeFirstWrite => self.nagle = Nagle::AfterFirstWrite,
            Nagle::AfterFirstWrite => self.nagle_off(),
            Nagle::Off => {}
        }
    }

    /// `TCP_NODELAY` on, if this driver has not set it yet.
    fn nagle_off(&mut self) {
        if self.nagle != Nagle::Off {
            if let Some(socket) = self.io.plain_socket() {
                socket.nodelay();
            }
            self.nagle = Nagle::Off;
        }
    }

    async fn flush(&mut self) -> std::io::Result<()> {
        if !self.wbuf.is_empty() {
            self.before_write();
            let result =
                write_all_progress(&mut self.io, &self.wbuf, self.ctx.limits.send_timeout).await;
            self.wbuf.clear();
            result?;
        }
        Ok(())
    }

    /// Queues a small `data` behind what is buffered; writes anything larger out at once,
    /// in one `writev` with what is buffered.
    async fn write_data(&mut self, data: &[u8]) -> std::io::Result<()> {
        if data.len() <= COPY_MAX && self.wbuf.len() + data.len() <= WRITE_BUFFER {
            self.wbuf.extend_from_slice(data);
            return Ok(());
        }
        self.before_write();
        let result =
            write_all_vectored(&mut self.io, &self.wbuf, data, self.ctx.limits.send_timeout).await;
        self.wbuf.clear();
        result
    }

    /// Writes one response; returns whether the connection may carry another request.
    async fn write_response<B>(
        &mut self,
        res: Response<B>,
        req: RequestInfo<'_>,
    ) -> std::io::Result<bool>
    where
        B: http_body::Body<Data = Bytes> + 'static,
        B::Error: Into<BoxError>,
    {
        let (parts, mut body) = res.into_parts();
        if self.wbuf.capacity() == 0 {
            // Given back while the connection waited (`read_more`).
            self.wbuf.reserve(BUFFER);
        }
        let encoded = encode::encode_head(&mut self.wbuf, &parts, body.size_hint().exact(), req);
        drop(parts);
        let expected = match encoded.framing {
            Framing::None => return Ok(encoded.keep_alive),
            Framing::Length(n) => Some(n),
            Framing::Chunked | Framing::Close => None,
        };

        // Zero-copy: only when the body is still scb's own `Body` carrying a file region.
        // Any layer that wrapped it changed its type, and the downcast fails.
        let region = (&mut body as &mut dyn Any)
            .downcast_mut::<Body>()
            .and_then(|b| b.file_region().cloned());
        if let Some(region) = region.filter(|r| Some(r.len()) == expected) {
            // Head and file in full segments; uncorked at the end, whatever happened.
            // A head and a file are two writes: Nagle off first, so that uncorking pushes
            // the file's last partial segment out instead of leaving it to Nagle. Before
            // the cork: turned off while corked, it would push the corked head out alone.
            self.nagle_off();
            if let Some(socket) = self.io.plain_socket() {
                socket.cork(true);
                let sent = async {
                    self.flush().await?;
                    let socket = self
                        .io
                        .plain_socket()
                        .ok_or(std::io::ErrorKind::Unsupported)?;
                    sys::send_file(socket, &region, self.ctx.limits.send_timeout).await
                }
                .await;
                if let Some(socket) = self.io.plain_socket() {
                    socket.cork(false);
                }
                sent?;
                return Ok(encoded.keep_alive);
            }
        }

        let chunked = encoded.framing == Framing::Chunked;
        let mut sent = 0u64;
        let mut body = pin!(body);
        loop {
            // A frame that is not ready yet (a proxied or generated body) must not keep
            // what is buffered from the client: flush, then wait. Streams stream.
            let frame =
                match std::future::poll_fn(|cx| Poll::Ready(body.as_mut().poll_frame(cx))).await {
                    Poll::Ready(frame) => frame,
                    Poll::Pending => {
                        self.flush().await?;
                        std::future::poll_fn(|cx| body.as_mut().poll_frame(cx)).await
                    }
                };
            let Some(frame) = frame else { break };
            let frame = frame.map_err(|e| std::io::Error::other(e.into()))?;
            let Ok(data) = frame.into_data() else {
                continue;
            };
            if data.is_empty() {
                continue;
            }
            sent += data.len() as u64;
            if expected.is_some_and(|n| sent > n) {
                return Err(std::io::Error::other(
                    "response body longer than its length",
                ));
            }
            if chunked {
                crate::http1::chunk_header(&mut self.wbuf, data.len());
                self.write_data(&data).await?;
                self.wbuf.extend_from_slice(b"\r\n");
            } else {
                self.write_data(&data).await?;
            }
        }
        if expected.is_some_and(|n| sent != n) {
            return Err(std::io::Error::other(
                "response body shorter than its length",
            ));
        }
        if chunked {
            self.wbuf.extend_from_slice(b"0\r\n\r\n");
        }
        Ok(encoded.keep_alive)
    }

    /// Flushes, half-closes, and (when the client may still be sending) reads and drops
    /// input for a moment so the kernel does not reset the connection under the response.
    async fn close(&mut self, linger: bool) {
        if self.flush().await.is_err() {
            return;
        }
        // A plain socket that is not lingering needs no shutdown: closing it (the drop)
        // sends the FIN after what was written, and one system call fewer is a
        // connection-per-request's gain. Over TLS the shutdown is the close_notify alert.
        if !linger && self.io.plain_socket().is_some() {
            return;
        }
        let _ = self.io.shutdown().await;
        if linger {
            let drain = async {
                let mut total = 0;
                while total < LINGER_BYTES {
                    self.rbuf.clear();
                    self.rbuf.reserve(16 * 1024);
                    match self.io.read_buf(&mut self.rbuf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => total += n,
                    }
                }
            };
            let _ = tokio::time::timeout(LINGER_TIME, drain).await;
        }
    }
}

#[cfg(test)]
#[path = "h1_tests.rs"]
mod tests;
