//! A strict decoder for `Transfer-Encoding: chunked` bodies (RFC 9112 §7.1): requests
//! to scb's server, responses to scb-proxy's upstream client.
//!
//! Strict because lenient chunk parsing is a request-smuggling vector: a front end and a
//! back end that disagree on where a chunk ends see different requests. Refused: a bare
//! LF, a missing CRLF after chunk data, a size that is empty, not hex, or overflows, bytes
//! other than extensions after the size, and obs-fold in trailers. Trailer fields are read
//! and dropped.

use bytes::{Buf, Bytes, BytesMut};

/// Longest chunk-size line (size plus extensions) accepted.
const MAX_SIZE_LINE: usize = 4096;

/// Most trailer fields one body may carry (besides the byte budget): the server's default
/// field count for a head, and hyper's figure, so that no peer reads a trailer section
/// scb takes as one it refuses.
const MAX_TRAILER_FIELDS: usize = 100;

/// Most bytes of chunk extensions one body may carry, over all its chunks: scb reads and
/// drops extensions, and without a total a peer could make it parse 4 KiB of them per
/// byte of body. hyper's figure.
const MAX_EXTENSION_BYTES: usize = 16 * 1024;

/// What one decoding step produced.
#[non_exhaustive]
#[derive(Debug, PartialEq, Eq)]
pub enum Decoded {
    /// Body bytes, the next in order.
    Data(Bytes),
    /// The last chunk and the trailer section have been read.
    Done,
    /// The buffer holds no complete piece: read more into it.
    NeedMore,
}

/// Why a chunked body was refused.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ChunkError {
    /// A chunk-size line that is not hex digits and extensions.
    #[error("invalid chunk size line")]
    Size,
    /// A chunk-size line longer than 4 KiB.
    #[error("chunk size line too long")]
    SizeLineTooLong,
    /// More than 16 KiB of chunk extensions in one body.
    #[error("chunk extensions over 16 KiB in one body")]
    Extensions,
    /// Chunk data not followed by CRLF.
    #[error("chunk data not followed by CRLF")]
    DataEnd,
    /// A line ended by LF without CR.
    #[error("line ended by a bare LF")]
    BareLf,
    /// A trailer field that is malformed (obs-fold included) or over the budget.
    #[error("invalid or oversized trailer section")]
    Trailers,
}

#[derive(Debug)]
enum State {
    Size,
    Data(u64),
    DataEnd,
    Trailers,
    Done,
}

/// Decodes a chunked body incrementally from a read buffer.
#[derive(Debug)]
pub struct ChunkedDecoder {
    state: State,
    trailer_budget: usize,
    trailer_fields: usize,
    extension_budget: usize,
}

impl ChunkedDecoder {
    /// A decoder that accepts at most `max_trailer_bytes` of trailer fields.
    pub fn new(max_trailer_bytes: usize) -> Self {
        Self {
            state: State::Size,
            trailer_budget: max_trailer_bytes,
            trailer_fields: 0,
            extension_budget: MAX_EXTENSION_BYTES,
        }
    }

    /// Consumes what it can from the front of `buf`.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Decoded, ChunkError> {
        loop {
            match self.state {
                State::Size => {
                    let Some(line) = take_line(buf, MAX_SIZE_LINE, ChunkError::SizeLineTooLong)?
                    else {
                        return Ok(Decoded::NeedMore);
                    };
                    let (size, extensions) = parse_size_line(&line)?;
                    self.extension_budget = self
                        .extension_budget
                        .checked_sub(extensions)
                        .ok_or(ChunkError::Extensions)?;
                    self.state = if size == 0 {
                        State::Trailers
                    } else {
                        State::Data(size)
                    };
                }
                State::Data(remaining) => {
                    if buf.is_empty() {
                        return Ok(Decoded::NeedMore);
                    }
                    let n = remaining.min(buf.len() as u64);
                    let data = buf.split_to(n as usize).freeze();
                    self.state = if n == remaining {
                        State::DataEnd
                    } else {
                        State::Data(remaining - n)
                    };
                    return Ok(Decoded::Data(data));
                }
                State::DataEnd => {
                    if buf.len() < 2 {
                        if buf.first().is_some_and(|&b| b != b'\r') {
                            return Err(ChunkError::DataEnd);
                        }
                        return Ok(Decoded::NeedMore);
                    }
                    if &buf[..2] != b"\r\n" {
                        return Err(ChunkError::DataEnd);
                    }
                    buf.advance(2);
                    self.state = State::Size;
                }
                State::Trailers => {
                    let Some(line) = take_line(buf, self.trailer_budget, ChunkError::Trailers)?
                    else {
                        return Ok(Decoded::NeedMore);
                    };
                    if line.is_empty() {
                        self.state = State::Done;
                        return Ok(Decoded::Done);
                    }
                    self.trailer_fields += 1;
                    if !is_field_line(&line) || self.trailer_fields > MAX_TRAILER_FIELDS {
                        return Err(ChunkError::Trailers);
                    }
                    self.trailer_budget = self.trailer_budget.saturating_sub(line.len() + 2);
                }
                State::Done => return Ok(Decoded::Done),
            }
        }
    }
}

/// Takes one CRLF-terminated line (without the CRLF) off the front of `buf`.
fn take_line(
    buf: &mut BytesMut,
    max: usize,
    too_long: ChunkError,
) -> Result<Option<Bytes>, ChunkError> {
    let Some(lf) = buf.iter().position(|&b| b == b'\n') else {
        // A line of `max` bytes may already have its CR here while the LF is in the next
        // read: whether a body is accepted must not depend on how its bytes arrive.
        if buf.len() > max + 1 {
            return Err(too_long);
        }
        return Ok(None);
    };
    if lf == 0 || buf[lf - 1] != b'\r' {
        return Err(ChunkError::BareLf);
    }
    if lf - 1 > max {
        return Err(too_long);
    }
    let line = buf.split_to(lf + 1).freeze();
    Ok(Some(line.slice(..lf - 1)))
}

/// A trailer field line: a token, `:`, then a field value as RFC 9110 5.5 has it (HTAB,
/// SP, visible ASCII, obs-text), the same rule as a head's fields. Above all no CR or NUL:
/// a front end that took a bare CR for a line end would disagree with us about where the
/// body ends. obs-fold (a leading space) is not a token.
fn is_field_line(line: &[u8]) -> bool {
    let Some(colon) = line.iter().position(|&b| b == b':') else {
        return false;
    };
    let is_tchar = |b: &u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(b);
    let is_value_byte = |&b: &u8| b == b'\t' || (b' '..=b'~').contains(&b) || b >= 0x80;
    colon > 0 && line[..colon].iter().all(is_tchar) && line[colon + 1..].iter().all(is_value_byte)
}

/// `chunk-size [ BWS ";" chunk-ext ]`: hex digits, then only extensions. The size, and
/// how many bytes the extensions take.
fn parse_size_line(line: &[u8]) -> Result<(u64, usize), ChunkError> {
    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    if digits == 0 || digits > 16 {
        return Err(ChunkError::Size);
    }
    let size = line[..digits].iter().fold(0u64, |n, &b| {
        let d = (b as char).to_digit(16).unwrap_or(0);
        (n << 4) | u64::from(d)
    });
    // BWS is SP and HTAB only: `trim_ascii_start` would also eat the stray CRs a front end
    // may read as a line end.
    let bws = line[digits..]
        .iter()
        .take_while(|&&b| b == b' ' || b == b'\t')
        .count();
    let rest = &line[digits + bws..];
    let is_control = |&b: &u8| (b < b' ' && b != b'\t') || b == 0x7f;
    if !(rest.is_empty() || rest[0] == b';') || rest.iter().any(is_control) {
        return Err(ChunkError::Size);
    }
    Ok((size, rest.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_all(input: &[u8]) -> Result<Vec<u8>, ChunkError> {
        let mut dec = ChunkedDecoder::new(1024);
        let mut buf = BytesMut::from(input);
        let mut out = Vec::new();
        loop {
            match dec.decode(&mut buf)? {
                Decoded::Data(d) => out.extend_from_slice(&d),
                Decoded::Done => return Ok(out),
                Decoded::NeedMore => return Err(ChunkError::Size),
            }
        }
    }

    #[test]
    fn decodes_chunks_extensions_and_trailers() {
        let body = b"5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nX-T: v\r\n\r\n";
        assert_eq!(decode_all(body).unwrap(), b"hello world");
    }

    #[test]
    fn decodes_byte_by_byte() {
        let body = b"a\r\n0123456789\r\n0\r\n\r\n";
        let mut dec = ChunkedDecoder::new(1024);
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        let mut done = false;
        for &b in body {
            buf.extend_from_slice(&[b]);
            loop {
                match dec.decode(&mut buf).unwrap() {
                    Decoded::Data(d) => out.extend_from_slice(&d),
                    Decoded::Done => {
                        done = true;
                        break;
                    }
                    Decoded::NeedMore => break,
                }
            }
        }
        assert!(done);
        assert_eq!(out, b"0123456789");
    }

    #[test]
    fn refuses_bad_sizes() {
        for bad in [
            &b"\r\n"[..],
            b"0x5\r\nhello\r\n0\r\n\r\n",
            b"-5\r\n",
            b"5 5\r\nhello\r\n",
            b"fffffffffffffffff\r\n",
            b"g\r\n",
            // A stray CR (or any control byte) between the size and its extension.
            b"0\r\r;x=y\r\n\r\n",
            b"0\r;x\r\n\r\n",
            b"0 \x0c;x\r\n\r\n",
            b"0;x=\x01\r\n\r\n",
        ] {
            assert!(
                decode_all(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn refuses_bare_lf_and_missing_crlf_after_data() {
        assert_eq!(
            decode_all(b"5\nhello\r\n0\r\n\r\n"),
            Err(ChunkError::BareLf)
        );
        assert_eq!(
            decode_all(b"5\r\nhelloX\r\n0\r\n\r\n"),
            Err(ChunkError::DataEnd)
        );
        assert_eq!(
            decode_all(b"5\r\nhello\r\n0\r\n\n"),
            Err(ChunkError::BareLf)
        );
    }

    #[test]
    fn refuses_obs_fold_and_oversized_trailers() {
        assert_eq!(
            decode_all(b"0\r\nX-A: a\r\n folded\r\n\r\n"),
            Err(ChunkError::Trailers)
        );
        let mut big = b"0\r\n".to_vec();
        for _ in 0..100 {
            big.extend_from_slice(b"X-Long-Trailer-Name: some value here\r\n");
        }
        big.extend_from_slice(b"\r\n");
        assert_eq!(decode_all(&big), Err(ChunkError::Trailers));
    }

    #[test]
    fn a_line_at_the_limit_is_accepted_however_it_is_split() {
        // Found by fuzzing: a 32-byte trailer arriving as "...CR" then "LF" was refused,
        // the same bytes in one read accepted.
        let wire = b"0\r\nX-Trailer: 0123456789abcdefghijk\r\n\r\n";
        for split in 1..wire.len() {
            let mut dec = ChunkedDecoder::new(32);
            let mut buf = BytesMut::from(&wire[..split]);
            let first = dec.decode(&mut buf);
            buf.extend_from_slice(&wire[split..]);
            let outcome = match first {
                Ok(Decoded::NeedMore) => dec.decode(&mut buf),
                other => other,
            };
            assert_eq!(outcome, Ok(Decoded::Done), "split at {split}");
        }
    }

    #[test]
    fn trailers_with_a_bare_cr_nul_control_or_bad_name_are_refused() {
        for bad in [
            &b"0\r\nX-A: a\rb\r\n\r\n"[..],
            b"0\r\nX-A: a\0b\r\n\r\n",
            b"0\r\nX-A: a\x03b\r\n\r\n",
            b"0\r\nX-A: a\x7fb\r\n\r\n",
            b"0\r\nX A: ab\r\n\r\n",
            b"0\r\n: ab\r\n\r\n",
        ] {
            assert_eq!(decode_all(bad), Err(ChunkError::Trailers), "{bad:?}");
        }
        let fine = b"0\r\nX-A: a\tb \xe9 ~\r\nX-B:\r\n\r\n";
        assert_eq!(decode_all(fine), Ok(Vec::new()));
    }

    #[test]
    fn trailer_fields_are_counted() {
        let body = |fields: usize| {
            let mut raw = b"2\r\nok\r\n0\r\n".to_vec();
            for i in 0..fields {
                raw.extend_from_slice(format!("x-t{i}: v\r\n").as_bytes());
            }
            raw.extend_from_slice(b"\r\n");
            raw
        };
        assert_eq!(decode_all(&body(100)).unwrap(), b"ok");
        assert_eq!(decode_all(&body(101)), Err(ChunkError::Trailers));
    }

    #[test]
    fn extensions_are_bounded_over_the_whole_body() {
        let body = |chunks: usize, ext: usize| {
            let mut raw = Vec::new();
            for _ in 0..chunks {
                raw.extend_from_slice(format!("1;x={}\r\nk\r\n", "a".repeat(ext)).as_bytes());
            }
            raw.extend_from_slice(b"0\r\n\r\n");
            raw
        };
        // 4 x 4000 bytes, each line under its own limit, 16,012 in all: taken.
        assert_eq!(decode_all(&body(4, 4000)).unwrap(), b"kkkk");
        // One more line goes over 16 KiB for the body.
        assert_eq!(decode_all(&body(5, 4000)), Err(ChunkError::Extensions));
    }

    #[test]
    fn huge_size_line_is_refused_before_its_end_arrives() {
        let mut dec = ChunkedDecoder::new(1024);
        let mut buf = BytesMut::from(&[b'1'; MAX_SIZE_LINE + 2][..]);
        assert_eq!(dec.decode(&mut buf), Err(ChunkError::SizeLineTooLong));
    }
}

#[cfg(test)]
mod proptests {
    use super::*;
    use proptest::prelude::*;

    fn encode(payload: &[u8], sizes: &[usize]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut rest = payload;
        let mut i = 0;
        while !rest.is_empty() {
            let n = sizes[i % sizes.len()].clamp(1, rest.len());
            out.extend_from_slice(format!("{n:x}\r\n").as_bytes());
            out.extend_from_slice(&rest[..n]);
            out.extend_from_slice(b"\r\n");
            rest = &rest[n..];
            i += 1;
        }
        out.extend_from_slice(b"0\r\n\r\n");
        out
    }

    proptest! {
        /// Any chunking of any payload, fed in any split, decodes to the payload.
        #[test]
        fn decodes_any_chunking_fed_in_any_split(
            payload in proptest::collection::vec(any::<u8>(), 0..4096),
            sizes in proptest::collection::vec(1usize..600, 1..8),
            feed in 1usize..300,
        ) {
            let wire = encode(&payload, &sizes);
            let mut dec = ChunkedDecoder::new(1024);
            let mut buf = BytesMut::new();
            let mut out = Vec::new();
            let mut done = false;
            for piece in wire.chunks(feed) {
                buf.extend_from_slice(piece);
                loop {
                    match dec.decode(&mut buf).unwrap() {
                        Decoded::Data(d) => out.extend_from_slice(&d),
                        Decoded::Done => { done = true; break; }
                        Decoded::NeedMore => break,
                    }
                }
            }
            prop_assert!(done);
            prop_assert_eq!(out, payload);
        }

        /// Arbitrary bytes end in data, an error or a request for more; never a panic.
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..1024)) {
            let mut dec = ChunkedDecoder::new(256);
            let mut buf = BytesMut::from(&bytes[..]);
            for _ in 0..bytes.len() + 2 {
                match dec.decode(&mut buf) {
                    Ok(Decoded::Data(_)) => {}
                    Ok(Decoded::Done | Decoded::NeedMore) | Err(_) => break,
                }
            }
        }
    }
}
