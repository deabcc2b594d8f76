//! scb's HTTP/1.1 client for upstream connections.
//!
//! Why scb's own and not hyper's `client::conn::http1`: hyper's client costs 12.8k of the
//! 33.7k user-space instructions of a proxied request (`cargo xtask profile proxy`,
//! bench/RESULTS.md), and with it every request crosses tasks twice: the service hands it
//! to the connection's own task through a channel, and is woken through another when the
//! head comes back. Here the request's own future writes
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
//! The request body is sent while the socket is watched for an answer: an upstream that
//! answers before it has read the body (a 413 or 401 for an upload) is heard at once, and
//! the rest of the body is not sent. Not done: full-duplex exchanges (an upstream that
//! streams its answer while it still reads the request gets the request cut at its
//! answer), pipelining, HTTP/2 upstreams, request trailers (dropped, as hyper does).

mod body;
pub(crate) mod h2;
pub(crate) mod pool;
mod request;
mod response;
mod stream;

pub(crate) use stream::Stream;

use std::future::poll_fn;
use std::io;
use std::pin::Pin;
use std::task::Poll;

use bytes::BytesMut;
use http::{Method, Request};
use http_body::Body as _;
use scb_core::http1::FieldOffsets;
use scb_core::{Body, BoxError};
use stream::WriteHalf;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

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
    pub(crate) stream: Stream,
    pub(crate) rbuf: BytesMut,
    pub(crate) wbuf: Vec<u8>,
    pub(crate) max_head: usize,
    /// Where the fields of the last head were, reused from response to response.
    scratch: FieldOffsets,
}

impl Connection {
    /// A connection over `stream`, refusing response heads longer than `max_head` bytes.
    pub(crate) fn new(stream: Stream, max_head: usize) -> Self {
        Self {
            stream,
            rbuf: BytesMut::with_capacity(HEAD_READ),
            wbuf: Vec::with_capacity(1024),
            max_head,
            scratch: FieldOffsets::default(),
        }
    }

    /// Whether the upstream closed this idle connection (or sent bytes nobody asked for,
    /// which makes it as unusable); see [`Stream::is_closed`].
    pub(crate) fn is_closed(&mut self) -> bool {
        self.stream.is_closed()
    }

    /// The socket and the bytes read past the last head: what an upgraded connection
    /// carries on with.
    pub(crate) fn into_parts(self) -> (Stream, BytesMut) {
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
        let mut whole = true;
        // A body's writer is boxed: it is 600 bytes (the body and the answer it races),
        // and without it this future would be that much larger for every request without
        // a body, the common case, and copied into the proxy's box on each.
        match framing {
            BodyFraming::Empty => self.write_head().await?,
            BodyFraming::Length(len) => {
                whole = Box::pin(self.write_body(req.body_mut(), Some(len))).await?;
            }
            BodyFraming::Chunked => whole = Box::pin(self.write_body(req.body_mut(), None)).await?,
        }
        let mut head = self.read_head(req.method()).await?;
        head.keep_alive &= whole;
        Ok(head)
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

    /// The head and the body after it, unless the upstream answers first.
    ///
    /// An upstream may answer before it has the whole body: a 413 or 401 for an upload it
    /// will not take, or a server that streams its answer while it reads. Then the rest of
    /// the body is not sent (waiting to send it could deadlock against an upstream that
    /// waits for its answer to be read) and the answer is read; the connection is not
    /// used again, since the upstream has an unfinished request on it. Returns whether the
    /// whole body went out.
    async fn write_body(
        &mut self,
        body: &mut Body,
        length: Option<u64>,
    ) -> Result<bool, SendError> {
        let Self {
            stream,
            rbuf,
            wbuf,
            max_head,
            ..
        } = self;
        let max_head = *max_head;
        let (mut reader, mut writer) = stream.split();
        let answered = async {
            rbuf.reserve(HEAD_READ);
            loop {
                match reader.read_buf(rbuf).await {
                    // Only interim responses so far (102, 103): the upstream still wants
                    // the body. They stay in the buffer for the head reader to skip; past
                    // the head limit the head reader refuses them.
                    Ok(n) if n > 0 && rbuf.len() <= max_head && response::only_interim(rbuf) => {}
                    // A final answer, the end, or an error: the head reader takes it.
                    _ => return,
                }
            }
        };
        // The answer is looked at first: once it has begun, no more of the body is sent.
        let whole = tokio::select! {
            biased;
            () = answered => false,
            sent = send_body(&mut writer, wbuf, body, length) => match sent {
                Ok(()) => true,
                // The upstream may have answered and closed: what it said is read, if the
                // reset left it readable, before the failure is taken as the outcome.
                Err(SendError::Io(_)) => false,
                Err(e) => return Err(e),
            },
        };
        if !whole {
            // The upstream sees the body end here rather than waiting for the rest of it.
            let _ = writer.shutdown().await;
        }
        Ok(whole)
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

/// Writes `wbuf` (the head) and `body` after it: frames that are ready are gathered with
/// the head into one write, large ones are written from their own buffer. `length` is the
/// declared Content-Length; `None` means chunked.
async fn send_body(
    writer: &mut WriteHalf<'_>,
    wbuf: &mut Vec<u8>,
    body: &mut Body,
    length: Option<u64>,
) -> Result<(), SendError> {
    let mut remaining = length;
    loop {
        let gathered = !wbuf.is_empty();
        let frame = poll_fn(|cx| match Pin::new(&mut *body).poll_frame(cx) {
            // Nothing more right now: what is gathered goes out before waiting.
            Poll::Pending if gathered => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
            Poll::Ready(frame) => Poll::Ready(Some(frame)),
        })
        .await;
        let data = match frame {
            None => {
                flush(writer, wbuf).await?;
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
            scb_core::http1::chunk_header(wbuf, data.len());
        }
        if data.len() >= DIRECT_WRITE {
            flush(writer, wbuf).await?;
            writer.write_all(&data).await.map_err(SendError::Io)?;
        } else {
            wbuf.extend_from_slice(&data);
        }
        if length.is_none() {
            wbuf.extend_from_slice(b"\r\n");
        }
        if remaining == Some(0) {
            // All it declared: more would be an error, and waiting for the body's end
            // would let an answer arriving meanwhile cost the connection.
            break;
        }
        if wbuf.len() >= FLUSH_AT {
            flush(writer, wbuf).await?;
        }
    }
    match remaining {
        Some(0) => {}
        Some(_) => return Err(SendError::Body("shorter than its Content-Length".into())),
        None => wbuf.extend_from_slice(b"0\r\n\r\n"),
    }
    flush(writer, wbuf).await
}

async fn flush(writer: &mut WriteHalf<'_>, wbuf: &mut Vec<u8>) -> Result<(), SendError> {
    writer.write_all(wbuf).await.map_err(SendError::Io)?;
    wbuf.clear();
    Ok(())
}

#[cfg(test)]
mod tests;
