//! FastCGI 1.0 records: the 8-byte header, the name-value pairs of `FCGI_PARAMS`, and the
//! records scb sends and reads as a Responder.
//!
//! Written here rather than taken from a crate: `fastcgi-client` (Apache-2.0, the one
//! maintained client) keeps its record layer private and its client owns the socket,
//! yielding a response stream that borrows it, so a connection could not go back to scb's
//! per-worker pool from the response body, nor the request body be sent from scb's
//! `Body` while the answer is read; `async-fcgi` is AGPL-3.0. The format itself is a
//! header and two length encodings (the specification's section 3).

use bytes::{Buf as _, Bytes, BytesMut};

/// The one version there is.
const VERSION: u8 = 1;
/// Bytes of a record header.
pub(crate) const HEADER_LEN: usize = 8;
/// The most content one record carries.
pub(crate) const MAX_CONTENT: usize = 65_535;

/// The request id of every exchange: one request per connection at a time (no
/// multiplexing, see the module documentation), as nginx does.
pub(crate) const REQUEST_ID: u16 = 1;

/// Record types (section 8).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Kind {
    BeginRequest = 1,
    EndRequest = 3,
    Params = 4,
    Stdin = 5,
    Stdout = 6,
    Stderr = 7,
}

/// `FCGI_RESPONDER`, the role of a web server's request.
const ROLE_RESPONDER: u16 = 1;
/// `FCGI_KEEP_CONN`: the application leaves the connection open after the request.
const KEEP_CONN: u8 = 1;

/// Appends a record header for `len` bytes of content of `kind`, without padding (the
/// specification recommends padding to 8 bytes, and requires none).
pub(crate) fn header(buf: &mut Vec<u8>, kind: Kind, len: usize) {
    debug_assert!(len <= MAX_CONTENT);
    let len = len as u16;
    buf.extend_from_slice(&[VERSION, kind as u8]);
    buf.extend_from_slice(&REQUEST_ID.to_be_bytes());
    buf.extend_from_slice(&len.to_be_bytes());
    buf.extend_from_slice(&[0, 0]);
}

/// Appends `FCGI_BEGIN_REQUEST` for a Responder, asking to keep the connection if `keep`.
pub(crate) fn begin_request(buf: &mut Vec<u8>, keep: bool) {
    header(buf, Kind::BeginRequest, 8);
    buf.extend_from_slice(&ROLE_RESPONDER.to_be_bytes());
    let flags = if keep { KEEP_CONN } else { 0 };
    buf.extend_from_slice(&[flags, 0, 0, 0, 0, 0]);
}

/// Appends `content` as records of `kind`, split at [`MAX_CONTENT`].
pub(crate) fn stream(buf: &mut Vec<u8>, kind: Kind, content: &[u8]) {
    for piece in content.chunks(MAX_CONTENT) {
        header(buf, kind, piece.len());
        buf.extend_from_slice(piece);
    }
}

/// Name-value pairs (section 3.4), gathered into the content of `FCGI_PARAMS` records.
#[derive(Debug, Default)]
pub(crate) struct Params {
    content: Vec<u8>,
}

impl Params {
    /// No pairs yet, with room for `bytes` of them.
    pub(crate) fn with_capacity(bytes: usize) -> Self {
        Self {
            content: Vec::with_capacity(bytes),
        }
    }

    /// Adds one pair. Lengths under 128 take a byte, longer ones four.
    pub(crate) fn add(&mut self, name: &[u8], value: &[u8]) {
        length(&mut self.content, name.len());
        length(&mut self.content, value.len());
        self.content.extend_from_slice(name);
        self.content.extend_from_slice(value);
    }

    /// The encoded pairs.
    #[cfg(test)]
    pub(crate) fn content(&self) -> &[u8] {
        &self.content
    }

    /// Appends the pairs as `FCGI_PARAMS` records, then the empty one that ends them.
    pub(crate) fn write(&self, buf: &mut Vec<u8>) {
        stream(buf, Kind::Params, &self.content);
        header(buf, Kind::Params, 0);
    }
}

fn length(buf: &mut Vec<u8>, len: usize) {
    if len < 128 {
        buf.push(len as u8);
    } else {
        // Names and values are far below 2^31 (the request head's limit bounds them).
        buf.extend_from_slice(&((len as u32) | 0x8000_0000).to_be_bytes());
    }
}

/// A record the application sent, its content split off the read buffer.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Record {
    Stdout(Bytes),
    Stderr(Bytes),
    /// `FCGI_END_REQUEST`: the request is over; whether it completed (protocol status
    /// `FCGI_REQUEST_COMPLETE`) or the application refused it (overloaded, cannot
    /// multiplex, unknown role).
    End {
        complete: bool,
    },
}

/// Takes the next whole record from `buf`; `None` until one has arrived.
///
/// # Errors
///
/// A record that is not a Responder's answer to request [`REQUEST_ID`]: another version,
/// another request id, or a type the application has no business sending.
pub(crate) fn next(buf: &mut BytesMut) -> Result<Option<Record>, &'static str> {
    if buf.len() < HEADER_LEN {
        return Ok(None);
    }
    let h = &buf[..HEADER_LEN];
    if h[0] != VERSION {
        return Err("a FastCGI record of an unknown version");
    }
    let kind = h[1];
    let id = u16::from_be_bytes([h[2], h[3]]);
    let len = usize::from(u16::from_be_bytes([h[4], h[5]]));
    let padding = usize::from(h[6]);
    if buf.len() < HEADER_LEN + len + padding {
        return Ok(None);
    }
    if id != REQUEST_ID {
        return Err("a FastCGI record for another request");
    }
    buf.advance(HEADER_LEN);
    let content = buf.split_to(len).freeze();
    buf.advance(padding);
    match kind {
        k if k == Kind::Stdout as u8 => Ok(Some(Record::Stdout(content))),
        k if k == Kind::Stderr as u8 => Ok(Some(Record::Stderr(content))),
        k if k == Kind::EndRequest as u8 => {
            if content.len() < 8 {
                return Err("a short FastCGI end-request record");
            }
            Ok(Some(Record::End {
                complete: content[4] == 0,
            }))
        }
        _ => Err("an unexpected FastCGI record type"),
    }
}

/// Whether `buf` holds, among whole records, the application's `FCGI_END_REQUEST`:
/// the answer is over while the request body was still going out.
pub(crate) fn holds_end(buf: &[u8]) -> bool {
    let mut at = 0;
    while let Some(h) = buf.get(at..at + HEADER_LEN) {
        if h[1] == Kind::EndRequest as u8 {
            return true;
        }
        at += HEADER_LEN + usize::from(u16::from_be_bytes([h[4], h[5]])) + usize::from(h[6]);
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_use_one_byte_lengths_under_128_and_four_above() {
        let mut params = Params::default();
        params.add(b"A", b"xy");
        let long = vec![b'v'; 300];
        params.add(b"LONG", &long);
        let c = params.content();
        assert_eq!(&c[..5], b"\x01\x02Axy");
        assert_eq!(&c[5..10], &[4, 0x80, 0, 1, 44]);
        assert_eq!(&c[10..14], b"LONG");
        assert_eq!(c.len(), 14 + 300);
    }

    #[test]
    fn long_content_is_split_into_records_of_at_most_65535_bytes() {
        let mut buf = Vec::new();
        stream(&mut buf, Kind::Stdin, &vec![7; 70_000]);
        assert_eq!(&buf[..8], &[1, 5, 0, 1, 0xff, 0xff, 0, 0]);
        let second = HEADER_LEN + MAX_CONTENT;
        assert_eq!(&buf[second..second + 8], &[1, 5, 0, 1, 0x11, 0x71, 0, 0]);
        assert_eq!(buf.len(), 2 * HEADER_LEN + 70_000);
    }

    #[test]
    fn records_are_read_whole_with_their_padding_skipped() {
        let mut buf = BytesMut::new();
        buf.extend_from_slice(&[1, 6, 0, 1, 0, 3, 5, 0]);
        buf.extend_from_slice(b"abc");
        assert_eq!(next(&mut buf), Ok(None), "padding not there yet");
        buf.extend_from_slice(&[0; 5]);
        buf.extend_from_slice(&[1, 3, 0, 1, 0, 8, 0, 0, 0, 0, 0, 0, 0]);
        assert!(holds_end(&buf));
        assert_eq!(
            next(&mut buf),
            Ok(Some(Record::Stdout(Bytes::from_static(b"abc"))))
        );
        assert_eq!(next(&mut buf), Ok(None));
        buf.extend_from_slice(&[0, 0, 0]);
        assert_eq!(next(&mut buf), Ok(Some(Record::End { complete: true })));
        assert!(buf.is_empty());
    }

    #[test]
    fn foreign_records_are_refused() {
        for bad in [
            [2, 6, 0, 1, 0, 0, 0, 0],
            [1, 6, 0, 2, 0, 0, 0, 0],
            [1, 9, 0, 1, 0, 0, 0, 0],
            [1, 3, 0, 1, 0, 0, 0, 0],
        ] {
            let mut buf = BytesMut::from(&bad[..]);
            assert!(next(&mut buf).is_err(), "{bad:?}");
        }
    }
}
