//! Response-head encoding for the HTTP/1.1 driver.
//!
//! The rules follow hyper's server encoder so that the fast path and the hyper path answer
//! the same way: the body's exact size becomes Content-Length, an unknown size is chunked
//! (HTTP/1.1) or close-delimited (HTTP/1.0), HEAD, 1xx, 204 and 304 carry no body, a
//! service's own Transfer-Encoding is dropped, and Date is added from a per-thread cache.

use std::cell::RefCell;
use std::time::{SystemTime, UNIX_EPOCH};

use http::{HeaderValue, Method, StatusCode, Version, header};

/// How the response body is framed on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Framing {
    /// No body bytes are sent (HEAD, 1xx, 204, 304, or an empty body).
    None,
    /// Exactly this many bytes.
    Length(u64),
    /// Chunked transfer coding.
    Chunked,
    /// The body ends when the connection closes (HTTP/1.0, unknown length).
    Close,
}

/// What the encoder needs to know about the request being answered.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RequestInfo<'a> {
    pub(crate) method: &'a Method,
    pub(crate) version: Version,
    pub(crate) keep_alive: bool,
}

/// The result of encoding a head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Encoded {
    pub(crate) framing: Framing,
    pub(crate) keep_alive: bool,
}

/// Appends the status line and header section of `parts` to `dst`.
///
/// `body_len` is the body's exact size when known. `keep_alive` is whether the driver
/// would keep the connection; the result says whether it still may (a close-delimited
/// body or a service's `Connection: close` ends it).
pub(crate) fn encode_head(
    dst: &mut Vec<u8>,
    parts: &http::response::Parts,
    body_len: Option<u64>,
    req: RequestInfo<'_>,
) -> Encoded {
    let status = parts.status;
    let is_head = *req.method == Method::HEAD;
    let bodiless_status = status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED;
    let mut keep_alive = req.keep_alive;

    dst.extend_from_slice(match req.version {
        Version::HTTP_10 => b"HTTP/1.0 ",
        _ => b"HTTP/1.1 ",
    });
    dst.extend_from_slice(status.as_str().as_bytes());
    dst.push(b' ');
    dst.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
    dst.extend_from_slice(b"\r\n");

    let mut service_len = None;
    let mut wrote_date = false;
    let mut wrote_connection = false;
    for (name, value) in &parts.headers {
        match *name {
            header::CONTENT_LENGTH => {
                // Written below, once, from the body or from this value.
                if service_len.is_none() {
                    service_len = Some(value.clone());
                }
                continue;
            }
            // The driver decides the transfer coding.
            header::TRANSFER_ENCODING => continue,
            header::CONNECTION => {
                if connection_has_close(value) {
                    keep_alive = false;
                }
                wrote_connection = true;
            }
            header::DATE => wrote_date = true,
            _ => {}
        }
        write_field(dst, name.as_str().as_bytes(), value.as_bytes());
    }

    // Decide the framing first: hyper writes `connection` before the length fields, and
    // the differential test holds us to hyper's bytes.
    enum Length<'v> {
        None,
        Service(&'v HeaderValue),
        Body(u64),
        Chunked,
    }
    let (framing, length) = if status.is_informational() || status == StatusCode::NO_CONTENT {
        (Framing::None, Length::None)
    } else if is_head || bodiless_status {
        // A HEAD (or 304) response describes the representation without sending it:
        // keep the service's length, else the body's: for HEAD even 0, the length the
        // GET's head carries (hyper leaves an empty body's out); a 304 says no length
        // of its own.
        let length = match (&service_len, body_len) {
            (Some(v), _) => Length::Service(v),
            (None, Some(n)) if n > 0 || (is_head && !bodiless_status) => Length::Body(n),
            _ => Length::None,
        };
        (Framing::None, length)
    } else if let Some(len) = body_len {
        let framing = if len == 0 {
            Framing::None
        } else {
            Framing::Length(len)
        };
        (framing, Length::Body(len))
    } else if let Some(len) = service_len.as_ref().and_then(parse_len) {
        (Framing::Length(len), Length::Body(len))
    } else if req.version == Version::HTTP_11 {
        (Framing::Chunked, Length::Chunked)
    } else {
        keep_alive = false;
        (Framing::Close, Length::None)
    };

    if !wrote_connection {
        if !keep_alive && req.version == Version::HTTP_11 {
            write_field(dst, b"connection", b"close");
        } else if keep_alive && req.version == Version::HTTP_10 {
            write_field(dst, b"connection", b"keep-alive");
        }
    }
    match length {
        Length::None => {}
        Length::Service(v) => write_field(dst, b"content-length", v.as_bytes()),
        Length::Body(n) => write_len(dst, n),
        Length::Chunked => write_field(dst, b"transfer-encoding", b"chunked"),
    }
    if !wrote_date {
        dst.extend_from_slice(b"date: ");
        with_date(|d| dst.extend_from_slice(d));
        dst.extend_from_slice(b"\r\n");
    }
    dst.extend_from_slice(b"\r\n");
    Encoded {
        framing,
        keep_alive,
    }
}

fn write_field(dst: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    dst.extend_from_slice(name);
    dst.extend_from_slice(b": ");
    dst.extend_from_slice(value);
    dst.extend_from_slice(b"\r\n");
}

fn write_len(dst: &mut Vec<u8>, len: u64) {
    dst.extend_from_slice(b"content-length: ");
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    let mut n = len;
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    dst.extend_from_slice(&digits[i..]);
    dst.extend_from_slice(b"\r\n");
}

/// A service's own Content-Length, by the same rule the request parser applies.
fn parse_len(v: &HeaderValue) -> Option<u64> {
    crate::http1::parse_content_length(v.as_bytes())
}

fn connection_has_close(v: &HeaderValue) -> bool {
    crate::http1::ConnectionOptions::of([v.as_bytes()]).close
}

struct CachedDate {
    second: u64,
    text: [u8; 29],
}

thread_local! {
    static DATE: RefCell<CachedDate> = const {
        RefCell::new(CachedDate { second: u64::MAX, text: [0; 29] })
    };
}

/// Calls `f` with the current IMF-fixdate, formatted at most once per second per thread
/// (`SystemTime::now` is a vDSO read, not a syscall).
pub(crate) fn with_date<R>(f: impl FnOnce(&[u8]) -> R) -> R {
    DATE.with(|cell| {
        let mut cached = cell.borrow_mut();
        let now = SystemTime::now();
        let second = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        if cached.second != second
            && let Some(text) = crate::date::imf_fixdate(now)
        {
            cached.text = text;
            cached.second = second;
        }
        f(&cached.text)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(
        res: http::Response<()>,
        method: &Method,
        version: Version,
        body_len: Option<u64>,
    ) -> (String, Encoded) {
        let (parts, ()) = res.into_parts();
        let mut dst = Vec::new();
        let enc = encode_head(
            &mut dst,
            &parts,
            body_len,
            RequestInfo {
                method,
                version,
                keep_alive: true,
            },
        );
        let text = String::from_utf8(dst).unwrap();
        (text, enc)
    }

    #[test]
    fn known_length_becomes_content_length_and_date_is_added() {
        let res = http::Response::builder()
            .header("content-type", "text/plain")
            .body(())
            .unwrap();
        let (text, enc) = encode(res, &Method::GET, Version::HTTP_11, Some(13));
        assert!(text.starts_with("HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n"));
        assert!(text.contains("content-length: 13\r\n"));
        assert!(text.contains("\r\ndate: "));
        assert!(text.ends_with("GMT\r\n\r\n"));
        assert_eq!(enc.framing, Framing::Length(13));
        assert!(enc.keep_alive);
    }

    #[test]
    fn unknown_length_is_chunked_in_11_and_close_delimited_in_10() {
        let res = || http::Response::new(());
        let (text, enc) = encode(res(), &Method::GET, Version::HTTP_11, None);
        assert!(text.contains("transfer-encoding: chunked\r\n"));
        assert_eq!(enc.framing, Framing::Chunked);
        let (text, enc) = encode(res(), &Method::GET, Version::HTTP_10, None);
        assert!(text.starts_with("HTTP/1.0 200 OK\r\n"));
        assert!(!text.contains("transfer-encoding"));
        assert_eq!(enc.framing, Framing::Close);
        assert!(!enc.keep_alive);
    }

    #[test]
    fn head_keeps_the_service_length_and_sends_no_body() {
        let res = http::Response::builder()
            .header("content-length", "1234")
            .body(())
            .unwrap();
        let (text, enc) = encode(res, &Method::HEAD, Version::HTTP_11, Some(0));
        assert!(text.contains("content-length: 1234\r\n"));
        assert_eq!(enc.framing, Framing::None);
        let (text, _) = encode(
            http::Response::new(()),
            &Method::HEAD,
            Version::HTTP_11,
            Some(13),
        );
        assert!(text.contains("content-length: 13\r\n"));
        // An empty body: the `content-length: 0` a GET's head has (a redirect, say).
        let (text, _) = encode(
            http::Response::new(()),
            &Method::HEAD,
            Version::HTTP_11,
            Some(0),
        );
        assert!(text.contains("content-length: 0\r\n"), "{text}");
    }

    #[test]
    fn no_content_has_no_length_and_service_transfer_encoding_is_dropped() {
        let res = http::Response::builder()
            .status(204)
            .header("transfer-encoding", "chunked")
            .body(())
            .unwrap();
        let (text, enc) = encode(res, &Method::GET, Version::HTTP_11, Some(0));
        assert!(!text.contains("content-length"));
        assert!(!text.contains("transfer-encoding"));
        assert_eq!(enc.framing, Framing::None);
    }

    #[test]
    fn service_connection_close_ends_keep_alive() {
        let res = http::Response::builder()
            .header("connection", "close")
            .body(())
            .unwrap();
        let (text, enc) = encode(res, &Method::GET, Version::HTTP_11, Some(0));
        assert_eq!(text.matches("connection").count(), 1);
        assert!(!enc.keep_alive);
    }

    #[test]
    fn http10_keep_alive_is_announced() {
        let (text, enc) = encode(
            http::Response::new(()),
            &Method::GET,
            Version::HTTP_10,
            Some(2),
        );
        assert!(text.contains("connection: keep-alive\r\n"));
        assert!(enc.keep_alive);
    }
}
