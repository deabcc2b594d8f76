//! Response-head parsing for the upstream client, and the framing rules of RFC 9112 §6.3.
//!
//! One `httparse` pass (obs-fold refused: httparse's default for responses), then the
//! field values are sliced out of the frozen head without copying, as scb's server does
//! for requests.

use std::mem::MaybeUninit;

use bytes::BytesMut;
use http::{HeaderName, HeaderValue, Method, StatusCode, Version, header};
use scb_core::http1::{FieldError, FieldOffsets};

/// Heads with more fields than this are refused (hyper's client allowed 100).
const MAX_FIELDS: usize = 128;

/// How the response body is framed, or what the response is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Framing {
    /// No body: HEAD, 204, 304, or a length of 0.
    Empty,
    /// Exactly this many bytes.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
    /// The body ends when the upstream closes the connection.
    Close,
    /// 101: the connection now carries another protocol.
    Upgrade,
    /// Another 1xx: a final response follows on the same connection.
    Interim,
}

/// A parsed response head.
#[derive(Debug)]
pub(crate) struct ResponseHead {
    pub(crate) parts: http::response::Parts,
    pub(crate) framing: Framing,
    /// Whether the connection may carry another request once this body is read.
    pub(crate) keep_alive: bool,
}

/// Fields a response's map has room for beyond the upstream's own, as the server's
/// request parser leaves.
const SPARE_FIELDS: usize = 4;

/// Parses one response head (to a request with `method`) from the front of `buf`.
///
/// `Ok(None)`: not complete yet. On success the head's bytes are taken off `buf`. The
/// error is the reason the response is refused.
pub(crate) fn parse(
    buf: &mut BytesMut,
    max_head: usize,
    method: &Method,
    scratch: &mut FieldOffsets,
) -> Result<Option<ResponseHead>, &'static str> {
    let mut fields = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_FIELDS];
    let mut res = httparse::Response::new(&mut []);
    let len = match httparse::ParserConfig::default().parse_response_with_uninit_headers(
        &mut res,
        buf,
        &mut fields,
    ) {
        Ok(httparse::Status::Complete(len)) if len <= max_head => len,
        Ok(httparse::Status::Partial) if buf.len() <= max_head => return Ok(None),
        Ok(_) => return Err("response head too large"),
        Err(httparse::Error::TooManyHeaders) => return Err("too many response header fields"),
        Err(_) => return Err("malformed response head"),
    };
    let status = res
        .code
        .and_then(|code| StatusCode::from_u16(code).ok())
        .ok_or("invalid status code")?;
    let version = match res.version {
        Some(0) => Version::HTTP_10,
        _ => Version::HTTP_11,
    };
    scratch.record(
        buf,
        res.headers.iter().map(|h| (h.name.as_bytes(), h.value)),
    );
    let head = buf.split_to(len).freeze();
    let mut rules = Rules::new(version);
    // Room for what the layers above add (a request id, `Cache-Status`, `Via`...)
    // without growing the map, which costs a rehash of every field.
    let headers = scratch
        .to_map(&head, SPARE_FIELDS, |name, value| rules.see(name, value))
        .map_err(|e| match e {
            FieldError::Name => "invalid header name",
            FieldError::Value => "invalid header value",
            FieldError::Refused(why) => why,
        })?;
    let (framing, keep_alive) = rules.finish(status, method)?;

    let mut res = http::Response::new(());
    *res.status_mut() = status;
    *res.version_mut() = version;
    *res.headers_mut() = headers;
    let (parts, ()) = res.into_parts();
    Ok(Some(ResponseHead {
        parts,
        framing,
        keep_alive,
    }))
}

/// Whether `buf`, read from an upstream while the request body is still going out, holds
/// nothing but interim (1xx, not 101) heads, the last one possibly incomplete: then the
/// upstream still wants the body. Read the way [`parse`] will read it (httparse), so the
/// two never disagree about where a head ends.
pub(crate) fn only_interim(buf: &[u8]) -> bool {
    let interim = |code: u16| (100..200).contains(&code) && code != 101;
    let mut rest = buf;
    while !rest.is_empty() {
        let mut fields = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_FIELDS];
        let mut res = httparse::Response::new(&mut []);
        match httparse::ParserConfig::default().parse_response_with_uninit_headers(
            &mut res,
            rest,
            &mut fields,
        ) {
            Ok(httparse::Status::Complete(len)) if res.code.is_some_and(interim) => {
                rest = &rest[len..];
            }
            // A status line not read to its code yet may still be an interim one.
            Ok(httparse::Status::Partial) => return res.code.is_none_or(interim),
            _ => return false,
        }
    }
    true
}

/// Whether a `Connection` value names nothing but `close` and `keep-alive`.
fn only_persistence(value: &[u8]) -> bool {
    scb_core::http1::connection_tokens(value).all(|token| {
        token.eq_ignore_ascii_case(b"close") || token.eq_ignore_ascii_case(b"keep-alive")
    })
}

/// What the framing-relevant fields said, checked as they are seen.
struct Rules {
    version: Version,
    content_length: Option<u64>,
    chunked: bool,
    close: bool,
    keep_alive: bool,
}

impl Rules {
    fn new(version: Version) -> Self {
        Self {
            version,
            content_length: None,
            chunked: false,
            close: false,
            keep_alive: false,
        }
    }

    /// Reads one field; `Ok(false)` leaves it out of the response's map.
    fn see(&mut self, name: &HeaderName, value: &HeaderValue) -> Result<bool, &'static str> {
        match *name {
            header::CONTENT_LENGTH => {
                if self.content_length.is_some() {
                    return Err("several Content-Length fields");
                }
                self.content_length = Some(
                    scb_core::http1::parse_content_length(value.as_bytes())
                        .ok_or("invalid Content-Length")?,
                );
            }
            header::TRANSFER_ENCODING => {
                if self.chunked {
                    return Err("several Transfer-Encoding fields");
                }
                // A coding scb would have to undo (gzip under chunked) or a body ended by
                // closing: neither is worth the risk of reading it differently from the
                // next hop.
                if scb_core::http1::transfer_coding(value.as_bytes())
                    != scb_core::http1::TransferCoding::Chunked
                {
                    return Err("transfer coding other than chunked");
                }
                self.chunked = true;
            }
            header::CONNECTION => {
                let options = scb_core::http1::ConnectionOptions::of([value.as_bytes()]);
                self.close |= options.close;
                self.keep_alive |= options.keep_alive;
                // `Connection: keep-alive` (or `close`), which most upstreams send with
                // every response, says all it has to say here: it is hop-by-hop and
                // names no other field, so it is not put in the map only to be removed
                // again (700 instructions of a proxied request). A value naming other
                // fields, or `upgrade`, stays for the hop-by-hop pass and the upgrade.
                if only_persistence(value.as_bytes()) {
                    return Ok(false);
                }
            }
            _ => {}
        }
        Ok(true)
    }

    fn finish(self, status: StatusCode, method: &Method) -> Result<(Framing, bool), &'static str> {
        if self.chunked && self.content_length.is_some() {
            // RFC 9112 §6.3: a sender must not send both; guessing which one was meant is
            // how responses get smuggled.
            return Err("both Content-Length and Transfer-Encoding");
        }
        if self.chunked && self.version == Version::HTTP_10 {
            return Err("Transfer-Encoding in an HTTP/1.0 response");
        }
        let framing = if status == StatusCode::SWITCHING_PROTOCOLS {
            Framing::Upgrade
        } else if status.is_informational() {
            Framing::Interim
        } else if *method == Method::HEAD
            || status == StatusCode::NO_CONTENT
            || status == StatusCode::NOT_MODIFIED
        {
            Framing::Empty
        } else if self.chunked {
            Framing::Chunked
        } else {
            match self.content_length {
                Some(0) => Framing::Empty,
                Some(len) => Framing::Length(len),
                None => Framing::Close,
            }
        };
        let persistent = match self.version {
            Version::HTTP_10 => self.keep_alive,
            _ => true,
        };
        Ok((
            framing,
            persistent && !self.close && framing != Framing::Close,
        ))
    }
}
