//! A minimal HTTP/1.1 client over `std::net::TcpStream`, for verification only.
//!
//! One GET per connection (`Connection: close`), read until the message is complete by its
//! own framing (Content-Length or chunked) or the server closes, with a deadline. Written
//! out rather than taken from a client crate so that what is checked is exactly the bytes
//! on the wire: no decompression, no redirects, no retries.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

/// Largest response accepted: the 1 MiB fixture plus generous headers.
const MAX_RESPONSE: usize = 2 << 20;

/// A parsed response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Response {
    /// Status code.
    pub(crate) status: u16,
    /// Header fields in order, names lower-cased.
    pub(crate) headers: Vec<(String, String)>,
    /// The body, de-chunked.
    pub(crate) body: Vec<u8>,
}

/// `GET path` on `addr`.
///
/// # Errors
///
/// On connect or I/O errors, the deadline, or a malformed or oversized response.
pub(crate) fn get(addr: SocketAddr, path: &str, timeout: Duration) -> anyhow::Result<Response> {
    let deadline = Instant::now() + timeout;
    let mut stream = TcpStream::connect_timeout(&addr, timeout)
        .with_context(|| format!("connecting to {addr}"))?;
    stream.set_write_timeout(Some(timeout))?;
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: scb-bench\r\nAccept: */*\r\n\
         Connection: close\r\n\r\n"
    );
    stream
        .write_all(request.as_bytes())
        .context("sending the request")?;

    let mut buf = Vec::with_capacity(16 * 1024);
    let mut chunk = vec![0; 64 * 1024];
    loop {
        if let Some(response) = parse(&buf, false)? {
            return Ok(response);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            bail!(
                "no complete response within {timeout:?} ({} bytes read)",
                buf.len()
            );
        }
        stream.set_read_timeout(Some(left))?;
        let n = stream.read(&mut chunk).context("reading the response")?;
        if n == 0 {
            return parse(&buf, true)?.ok_or_else(|| {
                anyhow::anyhow!("connection closed mid-response ({} bytes)", buf.len())
            });
        }
        buf.extend_from_slice(&chunk[..n]);
        if buf.len() > MAX_RESPONSE {
            bail!("response larger than {MAX_RESPONSE} bytes");
        }
    }
}

/// Parses a complete response from `buf`; `Ok(None)` if more bytes are needed. `eof`: the
/// server has closed, so a body without framing ends here.
///
/// # Errors
///
/// On a malformed head, chunk or length.
pub(crate) fn parse(buf: &[u8], eof: bool) -> anyhow::Result<Option<Response>> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut head = httparse::Response::new(&mut headers);
    let head_len = match head.parse(buf).context("malformed response head")? {
        httparse::Status::Complete(len) => len,
        httparse::Status::Partial => return Ok(None),
    };
    let status = head.code.context("no status code")?;
    let headers: Vec<(String, String)> = head
        .headers
        .iter()
        .map(|h| {
            (
                h.name.to_ascii_lowercase(),
                String::from_utf8_lossy(h.value).trim().to_owned(),
            )
        })
        .collect();
    let rest = &buf[head_len..];
    let find = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    };
    let body = if find("transfer-encoding").is_some_and(|te| te.eq_ignore_ascii_case("chunked")) {
        match dechunk(rest)? {
            Some(body) => body,
            None if eof => bail!("connection closed inside a chunked body"),
            None => return Ok(None),
        }
    } else if let Some(len) = find("content-length") {
        let len: usize = len.parse().context("invalid Content-Length")?;
        if rest.len() < len {
            if eof {
                bail!("connection closed after {} of {len} body bytes", rest.len());
            }
            return Ok(None);
        }
        rest[..len].to_vec()
    } else if status == 204 || status == 304 || (100..200).contains(&status) {
        Vec::new()
    } else if eof {
        rest.to_vec()
    } else {
        return Ok(None);
    };
    Ok(Some(Response {
        status,
        headers,
        body,
    }))
}

/// Decodes a chunked body; `Ok(None)` if incomplete.
fn dechunk(mut data: &[u8]) -> anyhow::Result<Option<Vec<u8>>> {
    let mut body = Vec::new();
    loop {
        let Some(line_end) = find_crlf(data) else {
            return Ok(None);
        };
        let line = std::str::from_utf8(&data[..line_end]).context("chunk size not ASCII")?;
        let size_text = line.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size_text, 16)
            .with_context(|| format!("invalid chunk size {size_text:?}"))?;
        data = &data[line_end + 2..];
        if size == 0 {
            // Trailer fields, then an empty line.
            loop {
                let Some(end) = find_crlf(data) else {
                    return Ok(None);
                };
                if end == 0 {
                    return Ok(Some(body));
                }
                data = &data[end + 2..];
            }
        }
        if data.len() < size + 2 {
            return Ok(None);
        }
        if &data[size..size + 2] != b"\r\n" {
            bail!("chunk not followed by CRLF");
        }
        body.extend_from_slice(&data[..size]);
        data = &data[size + 2..];
    }
}

fn find_crlf(data: &[u8]) -> Option<usize> {
    data.windows(2).position(|w| w == b"\r\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::thread;

    #[test]
    fn content_length_body_is_complete_only_when_all_bytes_are_in() {
        let full = b"HTTP/1.1 200 OK\r\nContent-Length: 13\r\nContent-Type: text/plain\r\n\r\nHello, world!";
        assert!(parse(&full[..full.len() - 1], false).unwrap().is_none());
        let resp = parse(full, false).unwrap().unwrap();
        assert_eq!(resp.status, 200);
        assert_eq!(resp.body, b"Hello, world!");
        assert!(
            resp.headers
                .contains(&("content-type".into(), "text/plain".into()))
        );
        assert!(parse(&full[..full.len() - 1], true).is_err());
    }

    #[test]
    fn chunked_body_with_extension_and_trailer_is_decoded() {
        let msg = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
                    7;x=y\r\nHello, \r\n6\r\nworld!\r\n0\r\nX-T: 1\r\n\r\n";
        let resp = parse(msg, false).unwrap().unwrap();
        assert_eq!(resp.body, b"Hello, world!");
        assert!(parse(&msg[..msg.len() - 2], false).unwrap().is_none());
        let bad = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n";
        assert!(parse(bad, false).is_err());
    }

    #[test]
    fn unframed_body_ends_at_close() {
        let msg = b"HTTP/1.1 404 Not Found\r\n\r\nnope";
        assert!(parse(msg, false).unwrap().is_none());
        assert_eq!(parse(msg, true).unwrap().unwrap().body, b"nope");
    }

    #[test]
    fn get_reads_a_response_from_a_socket() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            let mut req = [0u8; 1024];
            let n = conn.read(&mut req).unwrap();
            assert!(req[..n].starts_with(b"GET /x HTTP/1.1\r\n"));
            // Split across writes, and the connection stays open: framing ends it.
            conn.write_all(b"HTTP/1.1 200 OK\r\nContent-Le").unwrap();
            conn.write_all(b"ngth: 2\r\n\r\nok").unwrap();
            thread::sleep(Duration::from_millis(200));
        });
        let resp = get(addr, "/x", Duration::from_secs(5)).unwrap();
        assert_eq!((resp.status, resp.body.as_slice()), (200, &b"ok"[..]));
        server.join().unwrap();
    }
}
