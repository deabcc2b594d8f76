//! The request body the HTTP/1.1 driver hands to services.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http_body::{Frame, SizeHint};
use tokio::sync::mpsc;

use crate::BoxError;
use crate::http1::chunked::{ChunkedDecoder, Decoded};

/// The most of an unread request body read and dropped after the response so that the
/// connection can carry the next request (within the body's own deadline): a GET that
/// came with a small body its handler ignored keeps its connection, as with nginx. Beyond
/// this the connection is closed: reading a large body nobody wants costs more than a new
/// connection.
pub(super) const DISCARD_MAX: u64 = 64 * 1024;

/// One message from the driver to the body.
#[derive(Debug)]
pub(crate) enum Msg {
    Data(Bytes),
    End,
    Error(BoxError),
}

/// Why a request body the server hands to a service could not be read whole: the error
/// its frames end with, on every transport.
///
/// A layer that passes a body on (a proxy) finds it with `downcast_ref` on the body's
/// error, to answer the client the right way: 413 for [`TooLarge`](Self::TooLarge), 408
/// or 400 for the others.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BodyError {
    /// The client closed the connection before the body ended.
    #[error("client closed the connection before the request body ended")]
    Eof,
    /// The body did not arrive within the limits' `body_read_timeout`.
    #[error("request body not received within the body read timeout")]
    Timeout,
    /// The body is larger than the limits' `max_body_bytes`.
    #[error("request body larger than the limit")]
    TooLarge,
    /// The chunked framing is malformed.
    #[error("malformed chunked body: {0}")]
    Chunked(#[from] crate::http1::chunked::ChunkError),
    /// The body was read after the server had stopped feeding it (the response was sent
    /// before the body was read).
    #[error("request body aborted: the response was sent before the body was read")]
    Aborted,
    /// The body's DATA came to more or fewer bytes than its `Content-Length` (HTTP/3,
    /// where the length and the frames are separate: RFC 9114 §4.1.2 calls it malformed).
    #[error("request body length differs from its Content-Length")]
    LengthMismatch,
    /// Reading the connection failed.
    #[error("i/o error reading the request body: {0}")]
    Io(#[from] std::io::Error),
}

/// The receiving end: an `http_body::Body` fed by the connection driver.
///
/// The driver reads the socket only when the body has room for another chunk (a channel
/// of one), so a service that reads slowly slows the client down instead of making the
/// server buffer the body.
#[derive(Debug)]
pub(crate) struct ChannelBody {
    rx: mpsc::Receiver<Msg>,
    remaining: Option<u64>,
    done: bool,
}

impl http_body::Body for ChannelBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if self.done {
            return Poll::Ready(None);
        }
        match std::task::ready!(self.rx.poll_recv(cx)) {
            Some(Msg::Data(data)) => {
                if let Some(r) = &mut self.remaining {
                    *r = r.saturating_sub(data.len() as u64);
                }
                Poll::Ready(Some(Ok(Frame::data(data))))
            }
            Some(Msg::End) => {
                self.done = true;
                Poll::Ready(None)
            }
            Some(Msg::Error(e)) => {
                self.done = true;
                Poll::Ready(Some(Err(e)))
            }
            None => {
                self.done = true;
                Poll::Ready(Some(Err(BodyError::Aborted.into())))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }

    fn size_hint(&self) -> SizeHint {
        self.remaining
            .map_or_else(SizeHint::new, SizeHint::with_exact)
    }
}

enum Decoder {
    Length(u64),
    Chunked(ChunkedDecoder),
}

/// The driver's end: decodes body bytes from the read buffer and feeds the channel.
pub(crate) struct Feeder {
    tx: Option<mpsc::Sender<Msg>>,
    reader: Reader,
}

/// Where the body stands on the wire.
struct Reader {
    decoder: Decoder,
    received: u64,
    max: u64,
    deadline: tokio::time::Instant,
    /// The end of the body was decoded: the next request starts right after it.
    ended: bool,
    /// The body broke (bad framing, too large, too slow): its end cannot be found.
    failed: bool,
}

impl Feeder {
    /// A body of exactly `len` bytes, or chunked when `len` is `None`.
    pub(crate) fn new(
        len: Option<u64>,
        max: u64,
        max_trailer_bytes: usize,
        deadline: tokio::time::Instant,
    ) -> (Self, ChannelBody) {
        let (tx, rx) = mpsc::channel(1);
        let decoder = match len {
            Some(n) => Decoder::Length(n),
            None => Decoder::Chunked(ChunkedDecoder::new(max_trailer_bytes)),
        };
        let feeder = Self {
            tx: Some(tx),
            reader: Reader {
                decoder,
                received: 0,
                max,
                deadline,
                ended: false,
                failed: false,
            },
        };
        let body = ChannelBody {
            rx,
            remaining: len,
            done: false,
        };
        (feeder, body)
    }

    /// Whether the driver has nothing more to feed (the body ended, failed or was dropped).
    pub(crate) fn is_finished(&self) -> bool {
        self.tx.is_none()
    }

    /// Whether the body was read to its end, so the next request starts right after it.
    /// A Content-Length body whose every byte was handed over counts, even when its
    /// reader stopped before seeing the end (hyper's client stops once it has sent the
    /// declared length).
    pub(crate) fn is_complete(&self) -> bool {
        self.reader.is_complete()
    }

    /// Whether what is left of an unread body could be dropped within `max` bytes: a
    /// known rest that fits, or a chunked body (tried, and given up beyond `max`).
    pub(crate) fn may_discard(&self, max: u64) -> bool {
        !self.reader.failed
            && match self.reader.decoder {
                Decoder::Length(remaining) => remaining <= max,
                Decoder::Chunked(_) => true,
            }
    }

    /// Stops feeding the service: its body ends with an abort if it is still read.
    pub(crate) fn close_channel(&mut self) {
        self.tx = None;
    }

    /// Feeds one chunk (or the end) once the body has room, reading the socket if needed.
    pub(crate) async fn step<R>(&mut self, io: &mut R, rbuf: &mut BytesMut) -> Result<(), BodyError>
    where
        R: tokio::io::AsyncRead + Unpin,
    {
        let Some(tx) = &self.tx else { return Ok(()) };
        let Ok(permit) = tx.reserve().await else {
            // The service dropped the body: nothing more to feed. What it left unread
            // decides whether the connection can go on (see `is_complete`, `discard`).
            self.tx = None;
            return Ok(());
        };
        match self.reader.next_piece(io, rbuf).await? {
            Some(data) => permit.send(Msg::Data(data)),
            None => {
                permit.send(Msg::End);
                self.tx = None;
            }
        }
        Ok(())
    }

    /// Reads and drops the rest of the body, at most `max` bytes more, by the body
    /// deadline. True when the body ended within them: the connection can carry the next
    /// request, which a client that sent a small body to a handler that ignored it (a GET
    /// with a body) expects, as nginx does. False, and the connection is to be closed,
    /// when it is longer, too slow, or broken.
    pub(crate) async fn discard<R>(&mut self, io: &mut R, rbuf: &mut BytesMut, max: u64) -> bool
    where
        R: tokio::io::AsyncRead + Unpin,
    {
        let mut dropped = 0u64;
        while !self.reader.is_complete() {
            if self.reader.failed {
                return false;
            }
            match self.reader.next_piece(io, rbuf).await {
                Ok(Some(data)) => {
                    dropped += data.len() as u64;
                    if dropped > max {
                        return false;
                    }
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::debug!(error = %e, "unread request body could not be dropped");
                    return false;
                }
            }
        }
        true
    }

    /// Ends the body with `error`; the connection cannot be reused after this.
    pub(crate) fn fail(&mut self, error: BodyError) {
        if let Some(tx) = self.tx.take() {
            let _ = tx.try_send(Msg::Error(error.into()));
        }
        self.reader.failed = true;
    }
}

impl Reader {
    fn is_complete(&self) -> bool {
        !self.failed && (self.ended || matches!(self.decoder, Decoder::Length(0)))
    }

    /// The next piece of the body: data, or `None` at its end. Any error leaves the
    /// reader failed.
    async fn next_piece<R>(
        &mut self,
        io: &mut R,
        rbuf: &mut BytesMut,
    ) -> Result<Option<Bytes>, BodyError>
    where
        R: tokio::io::AsyncRead + Unpin,
    {
        let piece = self.read_piece(io, rbuf).await;
        if piece.is_err() {
            self.failed = true;
        }
        piece
    }

    async fn read_piece<R>(
        &mut self,
        io: &mut R,
        rbuf: &mut BytesMut,
    ) -> Result<Option<Bytes>, BodyError>
    where
        R: tokio::io::AsyncRead + Unpin,
    {
        loop {
            let decoded = match &mut self.decoder {
                Decoder::Length(0) => Decoded::Done,
                Decoder::Length(_) if rbuf.is_empty() => Decoded::NeedMore,
                Decoder::Length(remaining) => {
                    let n = (*remaining).min(rbuf.len() as u64);
                    *remaining -= n;
                    Decoded::Data(rbuf.split_to(n as usize).freeze())
                }
                Decoder::Chunked(dec) => dec.decode(rbuf)?,
            };
            match decoded {
                Decoded::Data(data) => {
                    self.received += data.len() as u64;
                    if self.received > self.max {
                        return Err(BodyError::TooLarge);
                    }
                    return Ok(Some(data));
                }
                Decoded::Done => {
                    self.ended = true;
                    return Ok(None);
                }
                Decoded::NeedMore => {
                    rbuf.reserve(16 * 1024);
                    let n = tokio::time::timeout_at(
                        self.deadline,
                        tokio::io::AsyncReadExt::read_buf(io, rbuf),
                    )
                    .await
                    .map_err(|_| BodyError::Timeout)??;
                    if n == 0 {
                        return Err(BodyError::Eof);
                    }
                }
            }
        }
    }
}
