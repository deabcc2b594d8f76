//! Request-head parsing and the framing rules of RFC 9112.
//!
//! One `httparse` pass over the read buffer; header values and the request target are then
//! sliced out of the frozen head without copying. Every framing ambiguity a proxy or cache
//! could read differently from us is refused here, never guessed at: Content-Length with
//! Transfer-Encoding, several Content-Length fields, a Transfer-Encoding whose final coding
//! is not `chunked`, obs-fold (httparse rejects it in requests), a missing or repeated Host.

use std::mem::MaybeUninit;

use bytes::{Bytes, BytesMut};
use http::{HeaderName, HeaderValue, Method, StatusCode, Uri, Version, header};

use crate::http1::{FieldError, FieldOffsets};

/// Heads with at most this many fields are parsed into a stack array.
const STACK_HEADERS: usize = 128;

/// How the request body is framed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BodyFraming {
    None,
    Length(u64),
    Chunked,
}

/// A parsed request head.
#[derive(Debug)]
pub(crate) struct Head {
    pub(crate) parts: http::request::Parts,
    pub(crate) framing: BodyFraming,
    pub(crate) keep_alive: bool,
    pub(crate) expect_continue: bool,
    /// An `Upgrade` request or CONNECT: the connection may stop being HTTP/1.1.
    pub(crate) upgrade: bool,
    /// The head's bytes as received, for handing the connection to hyper.
    pub(crate) raw: Bytes,
}

/// Why a head was refused, and with which status.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct HeadError {
    pub(crate) status: StatusCode,
    pub(crate) reason: &'static str,
}

impl HeadError {
    const fn new(status: StatusCode, reason: &'static str) -> Self {
        Self { status, reason }
    }

    const fn bad(reason: &'static str) -> Self {
        Self::new(StatusCode::BAD_REQUEST, reason)
    }
}

/// Limits the parser enforces.
#[derive(Clone, Copy, Debug)]
pub(crate) struct HeadLimits {
    pub(crate) max_header_bytes: usize,
    pub(crate) max_headers: usize,
    pub(crate) max_body_bytes: u64,
}

/// Scratch space reused across the requests of one connection.
#[derive(Debug, Default)]
pub(crate) struct Scratch {
    fields: FieldOffsets,
}

/// Parses one request head from the front of `buf`.
///
/// `Ok(None)` means the head is not complete yet. On success the head's bytes are removed
/// from `buf`; on error the connection is to be answered and closed.
pub(crate) fn parse(
    buf: &mut BytesMut,
    limits: HeadLimits,
    scratch: &mut Scratch,
) -> Result<Option<Head>, HeadError> {
    let mut stack = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; STACK_HEADERS];
    let mut heap = Vec::new();
    let headers: &mut [MaybeUninit<httparse::Header<'_>>] = if limits.max_headers <= STACK_HEADERS {
        &mut stack[..limits.max_headers]
    } else {
        heap.resize_with(limits.max_headers, MaybeUninit::uninit);
        &mut heap[..]
    };

    let mut req = httparse::Request::new(&mut []);
    let status =
        httparse::ParserConfig::default().parse_request_with_uninit_headers(&mut req, buf, headers);
    let len = match status {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => {
            if buf.len() > limits.max_header_bytes {
                return Err(too_large(buf));
            }
            return Ok(None);
        }
        Err(httparse::Error::TooManyHeaders) => {
            return Err(HeadError::new(
                StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
                "too many header fields",
            ));
        }
        Err(httparse::Error::Version) => {
            return match version_token(buf) {
                VersionToken::WellFormed => Err(HeadError::new(
                    StatusCode::HTTP_VERSION_NOT_SUPPORTED,
                    "unsupported HTTP version",
                )),
                VersionToken::Malformed => Err(HeadError::bad("malformed HTTP version")),
                VersionToken::Partial if buf.len() > limits.max_header_bytes => Err(too_large(buf)),
                VersionToken::Partial => Ok(None),
            };
        }
        Err(_) => return Err(HeadError::bad("malformed request head")),
    };
    if len > limits.max_header_bytes {
        return Err(too_large(buf));
    }

    // Record where everything is, then release the borrow of `buf` and freeze the head.
    let base = buf.as_ptr() as usize;
    let at = |s: &[u8]| (s.as_ptr() as usize - base, s.len());
    let method = req.method.ok_or(HeadError::bad("missing method"))?;
    let method =
        Method::from_bytes(method.as_bytes()).map_err(|_| HeadError::bad("invalid method"))?;
    let target = at(req.path.ok_or(HeadError::bad("missing target"))?.as_bytes());
    let version = match req.version {
        Some(0) => Version::HTTP_10,
        _ => Version::HTTP_11,
    };
    scratch.fields.record(
        buf,
        req.headers.iter().map(|h| (h.name.as_bytes(), h.value)),
    );
    let head = buf.split_to(len).freeze();
    let slice = |(start, len): (usize, usize)| head.slice(start..start + len);

    let uri = Uri::from_maybe_shared(slice(target))
        .map_err(|_| HeadError::bad("invalid request target"))?;

    let mut framing = Framing::new(version);
    // Room for what layers add to a request (request id, forwarding headers) without
    // growing the map.
    let headers = scratch
        .fields
        .to_map(&head, 4, |name, value| {
            framing.see(name, value).map(|()| true)
        })
        .map_err(|e| match e {
            FieldError::Name => HeadError::bad("invalid header name"),
            FieldError::Value => HeadError::bad("invalid header value"),
            FieldError::Refused(e) => e,
        })?;
    let framing = framing.finish(&method, limits.max_body_bytes)?;

    let mut req = http::Request::new(());
    *req.method_mut() = method;
    *req.uri_mut() = uri;
    *req.version_mut() = version;
    *req.headers_mut() = headers;
    let (parts, ()) = req.into_parts();
    Ok(Some(Head {
        parts,
        framing: framing.body,
        keep_alive: framing.keep_alive,
        expect_continue: framing.expect_continue,
        upgrade: framing.upgrade,
        raw: head,
    }))
}

/// What the version of a request line httparse refused is.
#[derive(Debug, PartialEq, Eq)]
enum VersionToken {
    /// `HTTP/DIGIT.DIGIT`, just not one scb serves: 505.
    WellFormed,
    /// No version at all (the name is case-sensitive: `http/1.1` is malformed): 400.
    Malformed,
    /// The line has not ended and may still become a well-formed version.
    Partial,
}

fn version_token(buf: &[u8]) -> VersionToken {
    let (line, complete) = match buf.iter().position(|&b| b == b'\n') {
        Some(end) => (&buf[..end], true),
        None => (buf, false),
    };
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let token = line.rsplit(|&b| b == b' ').next().unwrap_or_default();
    const SHAPE: &[u8] = b"HTTP/0.0";
    let fits = token.len() <= SHAPE.len()
        && token.iter().zip(SHAPE).all(|(&b, &want)| match want {
            b'0' => b.is_ascii_digit(),
            _ => b == want,
        });
    match (fits, token.len() == SHAPE.len(), complete) {
        (true, true, true) => VersionToken::WellFormed,
        (true, _, false) => VersionToken::Partial,
        _ => VersionToken::Malformed,
    }
}

fn too_large(buf: &[u8]) -> HeadError {
    if memchr_newline(buf) {
        HeadError::new(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "request head too large",
        )
    } else {
        HeadError::new(StatusCode::URI_TOO_LONG, "request line too long")
    }
}

fn memchr_newline(buf: &[u8]) -> bool {
    buf.contains(&b'\n')
}

/// What the framing-relevant fields said, checked as they are seen.
struct Framing {
    version: Version,
    content_length: Option<u64>,
    transfer_encoding: bool,
    hosts: u32,
    keep_alive: bool,
    saw_close: bool,
    expect_continue: bool,
    /// An `Upgrade` field in an HTTP/1.1 request.
    upgrade_field: bool,
    /// `upgrade` among the `Connection` options: RFC 9110 7.8 has the sender list it, and
    /// an `Upgrade` field without it is not meant for this hop. Only both together hand
    /// the connection to hyper (the proxy's `wants_upgrade` asks the same).
    connection_upgrade: bool,
}

struct FramingResult {
    body: BodyFraming,
    keep_alive: bool,
    expect_continue: bool,
    upgrade: bool,
}

impl Framing {
    fn new(version: Version) -> Self {
        Self {
            version,
            content_length: None,
            transfer_encoding: false,
            hosts: 0,
            keep_alive: version == Version::HTTP_11,
            saw_close: false,
            expect_continue: false,
            upgrade_field: false,
            connection_upgrade: false,
        }
    }

    fn see(&mut self, name: &HeaderName, value: &HeaderValue) -> Result<(), HeadError> {
        match *name {
            header::CONTENT_LENGTH => {
                if self.content_length.is_some() {
                    return Err(HeadError::bad("more than one content-length"));
                }
                self.content_length = Some(
                    crate::http1::parse_content_length(value.as_bytes())
                        .ok_or(HeadError::bad("invalid content-length"))?,
                );
            }
            header::TRANSFER_ENCODING => {
                if self.version == Version::HTTP_10 {
                    return Err(HeadError::bad("transfer-encoding in an HTTP/1.0 request"));
                }
                if self.transfer_encoding {
                    return Err(HeadError::bad("more than one transfer-encoding"));
                }
                self.transfer_encoding = true;
                match crate::http1::transfer_coding(value.as_bytes()) {
                    crate::http1::TransferCoding::Chunked => {}
                    crate::http1::TransferCoding::Layered => {
                        return Err(HeadError::new(
                            StatusCode::NOT_IMPLEMENTED,
                            "unsupported transfer coding",
                        ));
                    }
                    crate::http1::TransferCoding::NotChunked => {
                        return Err(HeadError::bad("transfer-encoding does not end in chunked"));
                    }
                }
            }
            header::HOST => {
                if !crate::http1::is_valid_host(value.as_bytes()) {
                    return Err(HeadError::bad("invalid host"));
                }
                self.hosts += 1;
            }
            header::CONNECTION => {
                let options = crate::http1::ConnectionOptions::of([value.as_bytes()]);
                self.saw_close |= options.close;
                self.keep_alive |= options.keep_alive;
                self.connection_upgrade |= options.upgrade;
            }
            header::EXPECT => {
                if value
                    .as_bytes()
                    .trim_ascii()
                    .eq_ignore_ascii_case(b"100-continue")
                {
                    self.expect_continue = true;
                } else {
                    return Err(HeadError::new(
                        StatusCode::EXPECTATION_FAILED,
                        "unsupported expectation",
                    ));
                }
            }
            header::UPGRADE => self.upgrade_field = self.version == Version::HTTP_11,
            _ => {}
        }
        Ok(())
    }

    fn finish(self, method: &Method, max_body: u64) -> Result<FramingResult, HeadError> {
        if self.transfer_encoding && self.content_length.is_some() {
            return Err(HeadError::bad("content-length with transfer-encoding"));
        }
        if self.hosts > 1 || (self.version == Version::HTTP_11 && self.hosts == 0) {
            return Err(HeadError::bad("a request needs exactly one host field"));
        }
        let body = match (self.transfer_encoding, self.content_length) {
            (true, _) => BodyFraming::Chunked,
            (false, Some(0) | None) => BodyFraming::None,
            (false, Some(n)) if n > max_body => {
                return Err(HeadError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "request body too large",
                ));
            }
            (false, Some(n)) => BodyFraming::Length(n),
        };
        Ok(FramingResult {
            body,
            keep_alive: self.keep_alive && !self.saw_close,
            expect_continue: self.expect_continue && body != BodyFraming::None,
            upgrade: (self.upgrade_field && self.connection_upgrade) || *method == Method::CONNECT,
        })
    }
}

/// A head followed by the bytes read after it, to replay to hyper on a hand-off.
pub(crate) fn rejoin(head: &[u8], rest: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(head.len() + rest.len());
    out.extend_from_slice(head);
    out.extend_from_slice(rest);
    out.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: HeadLimits = HeadLimits {
        max_header_bytes: 1024,
        max_headers: 8,
        max_body_bytes: 1000,
    };

    fn parse_str(s: &str) -> Result<Option<Head>, HeadError> {
        let mut buf = BytesMut::from(s.as_bytes());
        parse(&mut buf, LIMITS, &mut Scratch::default())
    }

    fn status_of(s: &str) -> StatusCode {
        parse_str(s).unwrap_err().status
    }

    #[test]
    fn simple_get_is_parsed_and_consumed_leaving_the_next_request() {
        let mut buf = BytesMut::from(&b"GET /a?b=c HTTP/1.1\r\nHost: x\r\nX-Y: z\r\n\r\nGET /"[..]);
        let head = parse(&mut buf, LIMITS, &mut Scratch::default())
            .unwrap()
            .unwrap();
        assert_eq!(head.parts.method, Method::GET);
        assert_eq!(head.parts.uri, "/a?b=c");
        assert_eq!(head.parts.headers["x-y"], "z");
        assert_eq!(head.framing, BodyFraming::None);
        assert!(head.keep_alive);
        assert_eq!(&buf[..], b"GET /");
    }

    #[test]
    fn only_upgrade_with_its_connection_option_leaves_the_driver() {
        let upgrade = |head: &str| parse_str(head).unwrap().unwrap().upgrade;
        assert!(upgrade(
            "GET / HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, Upgrade\r\nUpgrade: websocket\r\n\r\n"
        ));
        // Not meant for this hop (RFC 9110 7.8): the request stays with scb's driver.
        assert!(!upgrade(
            "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n\r\n"
        ));
        assert!(!upgrade(
            "GET / HTTP/1.1\r\nHost: x\r\nConnection: upgrade\r\n\r\n"
        ));
        assert!(!upgrade(
            "GET / HTTP/1.0\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n"
        ));
        assert!(upgrade("CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n"));
    }

    #[test]
    fn partial_head_waits_for_more() {
        assert!(
            parse_str("GET / HTTP/1.1\r\nHost: x\r\n")
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn content_length_with_transfer_encoding_is_refused() {
        let s =
            "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert_eq!(status_of(s), StatusCode::BAD_REQUEST);
        let s =
            "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n";
        assert_eq!(status_of(s), StatusCode::BAD_REQUEST);
    }

    #[test]
    fn duplicate_content_length_is_refused_even_when_equal() {
        let s = "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n";
        assert_eq!(status_of(s), StatusCode::BAD_REQUEST);
    }

    #[test]
    fn malformed_content_length_is_refused() {
        // Trailing whitespace is OWS, trimmed by the parser, so "3 " is a valid 3.
        for v in ["+3", " 3x", "3,3", "-1", "0x10", "99999999999999999999", ""] {
            let s = format!("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: {v}\r\n\r\n");
            assert_eq!(status_of(&s), StatusCode::BAD_REQUEST, "{v:?}");
        }
    }

    #[test]
    fn obs_fold_is_refused() {
        let s = "GET / HTTP/1.1\r\nHost: x\r\nX-A: a\r\n  folded\r\n\r\n";
        assert_eq!(status_of(s), StatusCode::BAD_REQUEST);
    }

    #[test]
    fn transfer_encoding_must_end_in_chunked() {
        let s = "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, gzip\r\n\r\n";
        assert_eq!(status_of(s), StatusCode::BAD_REQUEST);
        let s = "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n";
        assert_eq!(status_of(s), StatusCode::NOT_IMPLEMENTED);
        let s = "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: Chunked\r\n\r\n";
        assert_eq!(parse_str(s).unwrap().unwrap().framing, BodyFraming::Chunked);
    }

    #[test]
    fn http10_transfer_encoding_is_refused() {
        let s = "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert_eq!(status_of(s), StatusCode::BAD_REQUEST);
    }

    #[test]
    fn host_is_required_once_in_http11() {
        assert_eq!(status_of("GET / HTTP/1.1\r\n\r\n"), StatusCode::BAD_REQUEST);
        assert_eq!(
            status_of("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"),
            StatusCode::BAD_REQUEST
        );
        assert!(parse_str("GET / HTTP/1.0\r\n\r\n").unwrap().is_some());
    }

    #[test]
    fn too_many_headers_is_431() {
        let mut s = String::from("GET / HTTP/1.1\r\nHost: x\r\n");
        for i in 0..10 {
            s.push_str(&format!("X-{i}: v\r\n"));
        }
        s.push_str("\r\n");
        assert_eq!(status_of(&s), StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
    }

    #[test]
    fn oversized_head_is_431_and_oversized_request_line_is_414() {
        let s = format!(
            "GET / HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n",
            "a".repeat(2000)
        );
        assert_eq!(status_of(&s), StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
        let s = format!("GET /{} HTTP/1.1", "a".repeat(2000));
        assert_eq!(status_of(&s), StatusCode::URI_TOO_LONG);
    }

    #[test]
    fn body_framing_and_limits() {
        let s = "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n";
        assert_eq!(
            parse_str(s).unwrap().unwrap().framing,
            BodyFraming::Length(10)
        );
        let s = "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n";
        assert_eq!(parse_str(s).unwrap().unwrap().framing, BodyFraming::None);
        let s = "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1001\r\n\r\n";
        assert_eq!(status_of(s), StatusCode::PAYLOAD_TOO_LARGE);
    }

    #[test]
    fn connection_tokens_decide_keep_alive() {
        let h = |s: &str| parse_str(s).unwrap().unwrap().keep_alive;
        assert!(!h("GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
        assert!(!h("GET / HTTP/1.0\r\n\r\n"));
        assert!(h("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"));
        assert!(!h(
            "GET / HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\nConnection: close\r\n\r\n"
        ));
    }

    #[test]
    fn garbage_is_400_and_http2_version_is_505() {
        assert_eq!(
            status_of("\x16\x03\x01 hello\r\n\r\n"),
            StatusCode::BAD_REQUEST
        );
        assert_eq!(
            status_of("GET / HTTP/2.0\r\nHost: x\r\n\r\n"),
            StatusCode::HTTP_VERSION_NOT_SUPPORTED
        );
    }

    #[test]
    fn a_malformed_version_is_400_and_only_a_well_formed_one_505() {
        for version in ["HTTP/2.0", "HTTP/3.0", "HTTP/1.2", "HTTP/0.9"] {
            let s = format!("GET / {version}\r\nHost: x\r\n\r\n");
            assert_eq!(
                status_of(&s),
                StatusCode::HTTP_VERSION_NOT_SUPPORTED,
                "{version}"
            );
        }
        for version in [
            "http/1.1",
            "HTTP/1.10",
            "HTTP/1",
            "HTTP/a.b",
            "HTTP/1.1x",
            "HTTPS/1.1",
        ] {
            let s = format!("GET / {version}\r\nHost: x\r\n\r\n");
            assert_eq!(status_of(&s), StatusCode::BAD_REQUEST, "{version}");
        }
        // A line that has not ended yet may still become a version: wait for it.
        let mut buf = BytesMut::from(&b"GET / HTTP/2"[..]);
        assert!(matches!(
            parse(&mut buf, LIMITS, &mut Scratch::default()),
            Ok(None)
        ));
        assert_eq!(version_token(b"GET / HTTP/2"), VersionToken::Partial);
        assert_eq!(version_token(b"GET / http"), VersionToken::Malformed);
    }

    #[test]
    fn an_invalid_host_is_400() {
        for host in [
            "a b/c",
            "a/b",
            "user@host",
            "host:port",
            "host:99999",
            "h\x01",
        ] {
            let s = format!("GET / HTTP/1.1\r\nHost: {host}\r\n\r\n");
            assert_eq!(status_of(&s), StatusCode::BAD_REQUEST, "{host:?}");
        }
        for host in ["example.com", "example.com:8080", "[::1]:80", "127.0.0.1"] {
            let s = format!("GET / HTTP/1.1\r\nHost: {host}\r\n\r\n");
            assert!(parse_str(&s).unwrap().is_some(), "{host:?}");
        }
    }

    #[test]
    fn unknown_expectation_is_417() {
        let s = "POST / HTTP/1.1\r\nHost: x\r\nExpect: magic\r\nContent-Length: 1\r\n\r\n";
        assert_eq!(status_of(s), StatusCode::EXPECTATION_FAILED);
    }
}

#[cfg(test)]
mod proptests {
    use super::*;
    use proptest::prelude::*;

    const LIMITS: HeadLimits = HeadLimits {
        max_header_bytes: 4096,
        max_headers: 16,
        max_body_bytes: 1 << 20,
    };

    fn field() -> impl Strategy<Value = String> {
        ("[A-Za-z][A-Za-z0-9-]{0,20}", "[ -~]{0,40}")
            .prop_map(|(n, v)| format!("{n}: {}\r\n", v.trim()))
    }

    proptest! {
        /// Whatever bytes arrive, parsing answers (a head, "need more", or a status) and
        /// never panics; a parsed head consumed exactly its own bytes.
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
            let mut buf = BytesMut::from(&bytes[..]);
            match parse(&mut buf, LIMITS, &mut Scratch::default()) {
                Ok(Some(head)) => prop_assert_eq!(head.raw.len() + buf.len(), bytes.len()),
                Ok(None) => prop_assert_eq!(buf.len(), bytes.len()),
                Err(e) => prop_assert!(e.status.is_client_error() || e.status.is_server_error()),
            }
        }

        /// A well-formed head is parsed the same however much of what follows it is
        /// already buffered, and the following bytes are left untouched.
        #[test]
        fn valid_heads_parse_and_leave_the_rest(
            path in "/[a-z0-9/._-]{0,30}",
            fields in proptest::collection::vec(field(), 0..8),
            rest in proptest::collection::vec(any::<u8>(), 0..64),
        ) {
            let mut raw = format!("GET {path} HTTP/1.1\r\nHost: example\r\n");
            for f in &fields {
                raw.push_str(f);
            }
            raw.push_str("\r\n");
            let mut buf = BytesMut::from(raw.as_bytes());
            buf.extend_from_slice(&rest);
            let head = match parse(&mut buf, LIMITS, &mut Scratch::default()) {
                Ok(Some(head)) => head,
                // Generated names can collide with framing fields (e.g. "Content-Length").
                Err(e) => return Err(TestCaseError::reject(format!("{e:?}"))),
                Ok(None) => return Err(TestCaseError::fail("complete head not parsed")),
            };
            prop_assert_eq!(head.parts.uri.path(), &path[..]);
            prop_assert_eq!(&buf[..], &rest[..]);
        }
    }
}
