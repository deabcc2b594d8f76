//! scb's HTTP/1.1 client for upstream connections.
//!
//! Why scb's own and not hyper's `client::conn::http1`, which the proxy used first: measured
//! with `cargo xtask profile proxy` (bench/RESULTS.md), hyper's client was 12.8k of the
//! 33.7k user-space instructions of a proxied request, and every request crossed tasks
//! twice: the service handed it to the connection's own task through a channel, and was
//! woken through another when the head came back. Here the request's own future writes
//! the request and reads the response head, and the response body reads the upstream
//! socket from whichever task polls it (the client connection's, under scb's server): no
//! task per upstream connection, no channel, no wake-up in between.
//!
//! The framing rules are strict and shared with scb's server ([`scb_core::http1`]): a
//! response with both Content-Length and Transfer-Encoding, several Content-Length fields,
//! a transfer coding other than `chunked`, obs-fold, or a head over the limit is refused,
//! never guessed at; a body that ends early or breaks its chunking ends with an error, so
//! the client's connection is closed short of a complete response.
//!
//! Not done: pipelining, HTTP/2 upstreams, request trailers (dropped, as hyper does). The
//! request body is written whole before the response is read: an upstream that answers
//! early and stops reading leaves the request to fail on the write (502), not to
//! deadlock, since every wait is under the response timeout.

mod body;
mod request;
mod response;

use std::future::poll_fn;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use bytes::BytesMut;
use http::{Method, Request};
use http_body::Body as _;
use scb_core::{Body, BoxError};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

pub(crate) use body::Start;
pub(crate) use response::{Framing, ResponseHead};

use request::BodyFraming;

/// Bytes read at a time while a response head is incomplete.
const HEAD_READ: usize = 8 * 1024;
/// Request body bytes gathered before they are written.
const FLUSH_AT: usize = 64 * 1024;
/// A body frame at least this large is written from its own buffer, not copied.
const DIRECT_WRITE: usize = 16 * 1024;

/// Why an exchange failed before a usable response head.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SendError {
    /// Nothing of the request reached the upstream: the connection was closed. Safe to
    /// send again, whatever the method.
    #[error("the connection was closed before the request went out: {0}")]
    Unsent(#[source] io::Error),
    /// The connection broke after the request (or part of it) was written and before any
    /// byte of a response arrived.
    #[error("{0}")]
    Io(#[source] io::Error),
    /// The upstream's answer is not a response scb passes on.
    #[error("{0}")]
    Invalid(&'static str),
    /// The client's request body failed (too large, stalled, broken, or not the length
    /// it declared).
    #[error("request body: {0}")]
    Body(#[source] BoxError),
}

/// One keep-alive HTTP/1.1 connection to an upstream.
#[derive(Debug)]
pub(crate) struct Connection {
    stream: TcpStream,
    rbuf: BytesMut,
    wbuf: Vec<u8>,
    max_head: usize,
    /// Where the fields of the last head were, reused from response to response.
    scratch: Vec<response::FieldAt>,
}

impl Connection {
    /// A connection over `stream`, refusing response heads longer than `max_head` bytes.
    pub(crate) fn new(stream: TcpStream, max_head: usize) -> Self {
        Self {
            stream,
            rbuf: BytesMut::with_capacity(HEAD_READ),
            wbuf: Vec::with_capacity(1024),
            max_head,
            scratch: Vec::new(),
        }
    }

    /// Whether the upstream closed this idle connection (or sent bytes nobody asked for,
    /// which makes it as unusable).
    ///
    /// Costs no system call in the common case: the runtime has been told by epoll when the
    /// socket turned readable, and reading a response to its end (a short read) cleared
    /// that. Only a socket marked readable is read to tell which it is.
    pub(crate) fn is_closed(&self) -> bool {
        let mut cx = Context::from_waker(Waker::noop());
        match self.stream.poll_read_ready(&mut cx) {
            Poll::Pending => false,
            Poll::Ready(Err(_)) => true,
            Poll::Ready(Ok(())) => {
                !matches!(self.stream.try_read(&mut [0u8; 1]), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
            }
        }
    }

    /// The socket and the bytes read past the last head: what an upgraded connection
    /// carries on with.
    pub(crate) fn into_parts(self) -> (TcpStream, BytesMut) {
        (self.stream, self.rbuf)
    }

    /// Writes `req` (head, then body) and reads the response head, skipping interim 1xx
    /// responses other than 101.
    ///
    /// The request stays the caller's: after [`SendError::Unsent`], or any failure of a
    /// request without a body, it can be sent again as it is.
    pub(crate) async fn send(
        &mut self,
        req: &mut Request<Body>,
    ) -> Result<ResponseHead, SendError> {
        self.wbuf.clear();
        let framing = request::encode_head(&mut self.wbuf, req).map_err(SendError::Body)?;
        match framing {
            BodyFraming::Empty => self.write_head().await?,
            BodyFraming::Length(len) => self.write_body(req.body_mut(), Some(len)).await?,
            BodyFraming::Chunked => self.write_body(req.body_mut(), None).await?,
        }
        self.read_head(req.method()).await
    }

    /// A bodiless request: its head in one write. A first write that fails sent nothing.
    async fn write_head(&mut self) -> Result<(), SendError> {
        let n = self
            .stream
            .write(&self.wbuf)
            .await
            .map_err(SendError::Unsent)?;
        if n == 0 {
            return Err(SendError::Unsent(io::ErrorKind::WriteZero.into()));
        }
        self.stream
            .write_all(&self.wbuf[n..])
            .await
            .map_err(SendError::Io)
    }

    /// The head and the body after it: frames that are ready are gathered with the head
    /// into one write, large ones are written from their own buffer. `length` is the
    /// declared Content-Length; `None` means chunked.
    async fn write_body(&mut self, body: &mut Body, length: Option<u64>) -> Result<(), SendError> {
        let mut remaining = length;
        loop {
            let wbuf = &self.wbuf;
            let frame = poll_fn(|cx| match Pin::new(&mut *body).poll_frame(cx) {
                // Nothing more right now: what is gathered goes out before waiting.
                Poll::Pending if !wbuf.is_empty() => Poll::Ready(None),
                Poll::Pending => Poll::Pending,
                Poll::Ready(frame) => Poll::Ready(Some(frame)),
            })
            .await;
            let data = match frame {
                None => {
                    self.flush().await?;
                    continue;
                }
                Some(None) => break,
                Some(Some(Err(e))) => return Err(SendError::Body(e)),
                // Trailers are dropped: the upstream did not ask for them (no `TE: trailers`
                // goes up, it is hop-by-hop).
                Some(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) if !data.is_empty() => data,
                    _ => continue,
                },
            };
            if let Some(remaining) = remaining.as_mut() {
                *remaining = remaining
                    .checked_sub(data.len() as u64)
                    .ok_or_else(|| SendError::Body("longer than its Content-Length".into()))?;
            } else {
                scb_core::http1::chunk_header(&mut self.wbuf, data.len());
            }
            if data.len() >= DIRECT_WRITE {
                self.flush().await?;
                self.stream.write_all(&data).await.map_err(SendError::Io)?;
            } else {
                self.wbuf.extend_from_slice(&data);
            }
            if length.is_none() {
                self.wbuf.extend_from_slice(b"\r\n");
            }
            if self.wbuf.len() >= FLUSH_AT {
                self.flush().await?;
            }
        }
        match remaining {
            Some(0) => {}
            Some(_) => return Err(SendError::Body("shorter than its Content-Length".into())),
            None => self.wbuf.extend_from_slice(b"0\r\n\r\n"),
        }
        self.flush().await
    }

    async fn flush(&mut self) -> Result<(), SendError> {
        self.stream
            .write_all(&self.wbuf)
            .await
            .map_err(SendError::Io)?;
        self.wbuf.clear();
        Ok(())
    }

    async fn read_head(&mut self, method: &Method) -> Result<ResponseHead, SendError> {
        let mut answered = false;
        loop {
            if !self.rbuf.is_empty() {
                answered = true;
                let parsed =
                    response::parse(&mut self.rbuf, self.max_head, method, &mut self.scratch)
                        .map_err(SendError::Invalid)?;
                match parsed {
                    Some(head) if head.framing == Framing::Interim => continue,
                    Some(head) => return Ok(head),
                    None => {}
                }
            }
            self.rbuf.reserve(HEAD_READ);
            match self.stream.read_buf(&mut self.rbuf).await {
                Ok(0) if answered => return Err(SendError::Invalid("closed inside a response")),
                Ok(0) => {
                    return Err(SendError::Io(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the upstream closed the connection without a response",
                    )));
                }
                Ok(_) => {}
                Err(_) if answered => return Err(SendError::Invalid("broke inside a response")),
                Err(e) => return Err(SendError::Io(e)),
            }
        }
    }
}

#[cfg(test)]
mod tests;
