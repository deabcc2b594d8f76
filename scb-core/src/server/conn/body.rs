//! The request body the HTTP/1.1 driver hands to services.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http_body::{Frame, SizeHint};
use tokio::sync::mpsc;

use crate::BoxError;
use crate::http1::chunked::{ChunkedDecoder, Decoded};

/// One message from the driver to the body.
#[derive(Debug)]
pub(crate) enum Msg {
    Data(Bytes),
    End,
    Error(BoxError),
}

/// Why the request body could not be read whole.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BodyError {
    #[error("client closed the connection before the request body ended")]
    Eof,
    #[error("request body not received within the body read timeout")]
    Timeout,
    #[error("request body larger than the limit")]
    TooLarge,
    #[error("malformed chunked body: {0}")]
    Chunked(#[from] crate::http1::chunked::ChunkError),
    #[error("request body aborted: the response was sent before the body was read")]
    Aborted,
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
    decoder: Decoder,
    received: u64,
    max: u64,
    deadline: tokio::time::Instant,
    /// The service dropped the body before its end: the rest is unread.
    abandoned: bool,
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
            decoder,
            received: 0,
            max,
            deadline,
            abandoned: false,
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
    pub(crate) fn is_complete(&self) -> bool {
        self.tx.is_none() && !self.abandoned
    }

    /// Feeds one chunk (or the end) once the body has room, reading the socket if needed.
    pub(crate) async fn step<R>(&mut self, io: &mut R, rbuf: &mut BytesMut) -> Result<(), BodyError>
    where
        R: tokio::io::AsyncRead + Unpin,
    {
        let Some(tx) = &self.tx else { return Ok(()) };
        let Ok(permit) = tx.reserve().await else {
            // The service dropped the body. When every byte of a Content-Length body was
            // already handed over (hyper's client stops once it has sent the declared
            // length, without reading the end), the stream is at the next request and
            // the connection stays usable.
            self.abandoned = !matches!(self.decoder, Decoder::Length(0));
            self.tx = None;
            return Ok(());
        };
        loop {
            let decoded = match &mut self.decoder {
                Decoder::Length(0) => Decoded::Done,
                Decoder::Length(remaining) if rbuf.is_empty() => {
                    let _ = remaining;
                    Decoded::NeedMore
                }
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
                    permit.send(Msg::Data(data));
                    return Ok(());
                }
                Decoded::Done => {
                    permit.send(Msg::End);
                    self.tx = None;
                    return Ok(());
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

    /// Ends the body with `error`; the connection cannot be reused after this.
    pub(crate) fn fail(&mut self, error: BodyError) {
        if let Some(tx) = self.tx.take() {
            let _ = tx.try_send(Msg::Error(error.into()));
        }
        self.abandoned = true;
    }
}
