//! Entry points for the fuzz targets in `fuzz/`, built only with the `fuzzing` feature.
//!
//! Thin wrappers over crate-private parsers, taking bytes and numbers and answering in
//! plain types, so the targets can drive the parsers without any of their types becoming
//! public API. Not for use outside `fuzz/`: nothing here is stable.
//!
//! ```
//! use scb_core::fuzzing::{HeadOutcome, request_head};
//!
//! let (outcome, rest) = request_head(b"GET / HTTP/1.1\r\nHost: x\r\n\r\nnext", 1024, 8, 0);
//! let HeadOutcome::Parsed(head) = outcome else { panic!("{outcome:?}") };
//! assert_eq!(head.raw.len(), 27);
//! assert_eq!(rest, b"next");
//! ```

use bytes::{Bytes, BytesMut};

use crate::http1::chunked;
use crate::server::conn::head;

mod exchange;

pub use exchange::{Peer, exchange};

/// What [`request_head`] made of its input.
#[derive(Debug)]
pub enum HeadOutcome {
    /// The head is not complete yet: more bytes are needed.
    Incomplete,
    /// The head was refused with this status code.
    Refused(u16),
    /// A complete head.
    Parsed(Box<ParsedHead>),
}

/// A head [`request_head`] accepted.
#[derive(Debug)]
pub struct ParsedHead {
    /// The request line and fields.
    pub parts: http::request::Parts,
    /// How the body is framed.
    pub body: BodyFraming,
    /// Whether the connection may carry another request after this one.
    pub keep_alive: bool,
    /// Whether the client waits for `100 Continue`.
    pub expect_continue: bool,
    /// An `Upgrade` or CONNECT request.
    pub upgrade: bool,
    /// The head's bytes as received.
    pub raw: Bytes,
}

/// How a parsed head frames its body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyFraming {
    /// No body.
    None,
    /// `Content-Length`.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
}

/// Parses one request head from the front of `input` under the given limits, and returns
/// what the parser left of the buffer alongside the outcome.
pub fn request_head(
    input: &[u8],
    max_header_bytes: usize,
    max_headers: usize,
    max_body_bytes: u64,
) -> (HeadOutcome, Vec<u8>) {
    let mut buf = BytesMut::from(input);
    let limits = head::HeadLimits {
        max_header_bytes,
        max_headers,
        max_body_bytes,
    };
    let outcome = match head::parse(&mut buf, limits, &mut head::Scratch::default()) {
        Ok(None) => HeadOutcome::Incomplete,
        Err(e) => HeadOutcome::Refused(e.status.as_u16()),
        Ok(Some(h)) => HeadOutcome::Parsed(Box::new(ParsedHead {
            parts: h.parts,
            body: match h.framing {
                head::BodyFraming::None => BodyFraming::None,
                head::BodyFraming::Length(n) => BodyFraming::Length(n),
                head::BodyFraming::Chunked => BodyFraming::Chunked,
            },
            keep_alive: h.keep_alive,
            expect_continue: h.expect_continue,
            upgrade: h.upgrade,
            raw: h.raw,
        })),
    };
    (outcome, buf.to_vec())
}

/// A chunked-body decoder with its own read buffer, fed by [`push`](Self::push).
#[derive(Debug)]
pub struct ChunkedDecoder {
    decoder: chunked::ChunkedDecoder,
    buf: BytesMut,
}

/// One step of [`ChunkedDecoder::decode`].
#[derive(Debug, PartialEq, Eq)]
pub enum ChunkStep {
    /// Body bytes.
    Data(Bytes),
    /// The body ended (last chunk and trailers read).
    Done,
    /// The buffer holds no complete next step.
    NeedMore,
}

impl ChunkedDecoder {
    /// A decoder that accepts at most `max_trailer_bytes` of trailer fields.
    pub fn new(max_trailer_bytes: usize) -> Self {
        Self {
            decoder: chunked::ChunkedDecoder::new(max_trailer_bytes),
            buf: BytesMut::new(),
        }
    }

    /// Appends bytes as if read from the connection.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// Runs one decoding step over the buffer.
    ///
    /// # Errors
    ///
    /// The decoder's refusal, as its message.
    pub fn decode(&mut self) -> Result<ChunkStep, String> {
        match self.decoder.decode(&mut self.buf) {
            Ok(chunked::Decoded::Data(data)) => Ok(ChunkStep::Data(data)),
            Ok(chunked::Decoded::Done) => Ok(ChunkStep::Done),
            Ok(chunked::Decoded::NeedMore) => Ok(ChunkStep::NeedMore),
            Err(e) => Err(e.to_string()),
        }
    }

    /// How many pushed bytes the decoder has not consumed.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }
}
