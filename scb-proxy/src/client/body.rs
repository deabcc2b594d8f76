//! The response body, read from the upstream connection by whoever polls it.

use std::future::Future as _;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http_body::{Frame, SizeHint};
use scb_core::BoxError;
use scb_core::http1::chunked::{ChunkedDecoder, Decoded};
use tokio::io::AsyncReadExt as _;

use super::{Connection, Framing};
use crate::client::pool::Home;

/// Bytes read at a time while a body streams.
const BODY_READ: usize = 64 * 1024;
/// Trailer bytes accepted after a chunked body (then dropped).
const MAX_TRAILER_BYTES: usize = 16 * 1024;

/// How a response body begins.
#[derive(Debug)]
pub(crate) enum Start {
    /// The whole body came with the head (most small responses): no streaming needed.
    /// `reusable` is the connection, when it may carry another request now.
    Complete {
        body: Bytes,
        reusable: Option<Connection>,
    },
    /// The body has yet to be read.
    Streaming(ResponseBody),
}

impl Start {
    /// The body framed by `framing` on `conn`, whose head has just been read.
    pub(crate) fn new(mut conn: Connection, framing: Framing, keep_alive: bool) -> Self {
        let state = match framing {
            Framing::Length(len) if conn.rbuf.len() as u64 >= len => {
                let body = conn.rbuf.split_to(len as usize).freeze();
                return Self::Complete {
                    body,
                    reusable: reusable(conn, keep_alive),
                };
            }
            Framing::Length(len) => State::Length(len),
            Framing::Chunked => State::Chunked(ChunkedDecoder::new(MAX_TRAILER_BYTES)),
            Framing::Close => State::Close,
            Framing::Empty => {
                return Self::Complete {
                    body: Bytes::new(),
                    reusable: reusable(conn, keep_alive),
                };
            }
            // Not HTTP/1.1 exchanges any more (or not over yet): never back in a pool.
            Framing::Upgrade | Framing::Interim => {
                return Self::Complete {
                    body: Bytes::new(),
                    reusable: None,
                };
            }
        };
        Self::Streaming(ResponseBody {
            conn: Some(conn),
            state,
            keep_alive,
            home: None,
        })
    }
}

/// The connection, when it may be used again: keep-alive, and nothing read past the
/// response (bytes nobody asked for would be taken for the next response).
fn reusable(conn: Connection, keep_alive: bool) -> Option<Connection> {
    (keep_alive && conn.rbuf.is_empty()).then_some(conn)
}

#[derive(Debug)]
enum State {
    Length(u64),
    Chunked(ChunkedDecoder),
    Close,
}

/// A response body streamed from its upstream connection.
///
/// Once read to its end, the connection goes back to its pool ([`Self::returning_to`]),
/// in the same poll that yields the last bytes. Dropped before the end, the connection is
/// closed with it: what is left of the body would be taken for the next response.
#[derive(Debug)]
pub(crate) struct ResponseBody {
    /// `None` once the body has ended (or failed).
    conn: Option<Connection>,
    state: State,
    keep_alive: bool,
    home: Option<Home>,
}

impl ResponseBody {
    /// Gives the connection back to `home` when the body has been read whole.
    pub(crate) fn returning_to(mut self, home: Home) -> Self {
        self.home = Some(home);
        self
    }

    /// The body has ended well: the connection goes home if it may be used again.
    fn finish(&mut self) {
        if let (Some(conn), Some(home)) = (self.conn.take(), self.home.take())
            && let Some(conn) = reusable(conn, self.keep_alive)
        {
            home.put(conn);
        }
    }

    fn fail(&mut self, error: impl Into<BoxError>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.conn = None;
        Poll::Ready(Some(Err(error.into())))
    }
}

/// The upstream closed the connection before the end of a body that had a length.
#[derive(Debug, thiserror::Error)]
#[error("the upstream closed the connection inside the response body")]
pub(crate) struct Truncated;

impl http_body::Body for ResponseBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        loop {
            let Some(conn) = this.conn.as_mut() else {
                return Poll::Ready(None);
            };
            // What is buffered first; a read only when it is not enough.
            match &mut this.state {
                State::Length(remaining) if !conn.rbuf.is_empty() => {
                    let n = (*remaining).min(conn.rbuf.len() as u64);
                    let data = conn.rbuf.split_to(n as usize).freeze();
                    *remaining -= n;
                    if *remaining == 0 {
                        this.finish();
                    }
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                State::Chunked(decoder) => match decoder.decode(&mut conn.rbuf) {
                    Ok(Decoded::Data(data)) => return Poll::Ready(Some(Ok(Frame::data(data)))),
                    Ok(Decoded::Done) => {
                        this.finish();
                        return Poll::Ready(None);
                    }
                    Ok(_) => {}
                    Err(e) => return this.fail(e),
                },
                State::Close if !conn.rbuf.is_empty() => {
                    let data = conn.rbuf.split().freeze();
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                _ => {}
            }
            conn.rbuf.reserve(BODY_READ);
            // `read_buf`'s future keeps no state between polls: one made per poll is the
            // same as one kept.
            let read = std::pin::pin!(conn.stream.read_buf(&mut conn.rbuf)).poll(cx);
            match ready!(read) {
                Ok(0) if matches!(this.state, State::Close) => {
                    this.conn = None;
                    return Poll::Ready(None);
                }
                Ok(0) => return this.fail(Truncated),
                Ok(_) => {}
                Err(e) => return this.fail(e),
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.conn.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        match (&self.conn, &self.state) {
            (None, _) => SizeHint::with_exact(0),
            (Some(_), State::Length(remaining)) => SizeHint::with_exact(*remaining),
            _ => SizeHint::default(),
        }
    }
}
