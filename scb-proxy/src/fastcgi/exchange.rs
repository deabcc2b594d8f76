//! One FastCGI exchange on a pooled connection: the request's records and its body as
//! `FCGI_STDIN`, then the CGI response read back from `FCGI_STDOUT`, with `FCGI_STDERR`
//! logged as it comes.

use std::future::Future as _;
use std::future::poll_fn;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{Bytes, BytesMut};
use http::header::{self, HeaderName, HeaderValue};
use http::{HeaderMap, StatusCode};
use http_body::{Body as _, Frame, SizeHint};
use scb_core::request_id::Id;
use scb_core::{Body, BoxError};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use super::record::{self, Kind, Record};
use crate::client::pool::Home;
use crate::client::{Connection, SendError};

/// Bytes read at a time, at most.
const READ: usize = 16 * 1024;
/// Free room below which the read buffer grows before a read. A connection's buffer
/// starts at 8 KiB, which most answers fit: growing it before every read (to a free
/// 16 KiB) moved it twice per request, a tenth of the instructions of a small one.
const MIN_ROOM: usize = 4 * 1024;
/// Bytes of an answer read while the request body is still going out: the application
/// may write before it has read its input (a progress page, an early error), and reading
/// it meanwhile keeps both sides from waiting on full socket buffers.
const READ_AHEAD: usize = 256 * 1024;
/// Request body bytes gathered into records before they are written.
const FLUSH_AT: usize = 64 * 1024;
/// The most response header fields accepted.
const MAX_FIELDS: usize = 100;
/// The most of one stderr message logged.
const MAX_LOGGED: usize = 2048;

/// Who a request's stderr lines are logged as.
#[derive(Clone, Debug)]
pub(crate) struct LogAs {
    pub(crate) id: Option<Id>,
    /// Formatted only when there is something to log.
    pub(crate) upstream: crate::Upstream,
}

impl LogAs {
    /// Logs what the application wrote to stderr, a line at a time.
    fn stderr(&self, content: &[u8]) {
        let text = String::from_utf8_lossy(&content[..content.len().min(MAX_LOGGED)]);
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            tracing::warn!(
                upstream = %self.upstream,
                request_id = self.id.as_ref().map_or("-", Id::as_str),
                "fastcgi stderr: {line}"
            );
        }
    }
}

/// Writes the request: `conn.wbuf` (its begin and params records, and the end of an
/// empty stdin when there is no body), then `body` as `FCGI_STDIN` records. While the body
/// goes out the connection is read too; once the application has ended its answer, the
/// rest of the body is not sent. Returns whether the whole body went out.
pub(crate) async fn send(conn: &mut Connection, body: Option<Body>) -> Result<bool, SendError> {
    let Some(mut body) = body else {
        let n = conn
            .stream
            .write(&conn.wbuf)
            .await
            .map_err(SendError::Unsent)?;
        if n == 0 {
            return Err(SendError::Unsent(std::io::ErrorKind::WriteZero.into()));
        }
        conn.stream
            .write_all(&conn.wbuf[n..])
            .await
            .map_err(SendError::Io)?;
        return Ok(true);
    };
    let Connection {
        stream, rbuf, wbuf, ..
    } = conn;
    let (mut reader, mut writer) = stream.split();
    let sending = async {
        loop {
            let gathered = !wbuf.is_empty();
            let frame = poll_fn(|cx| match Pin::new(&mut body).poll_frame(cx) {
                Poll::Pending if gathered => Poll::Ready(None),
                Poll::Pending => Poll::Pending,
                Poll::Ready(frame) => Poll::Ready(Some(frame)),
            })
            .await;
            match frame {
                None => {
                    writer.write_all(wbuf).await.map_err(SendError::Io)?;
                    wbuf.clear();
                }
                Some(None) => break,
                Some(Some(Err(e))) => return Err(SendError::Body(e)),
                Some(Some(Ok(frame))) => {
                    if let Ok(data) = frame.into_data() {
                        record::stream(wbuf, Kind::Stdin, &data);
                    }
                    if wbuf.len() >= FLUSH_AT {
                        writer.write_all(wbuf).await.map_err(SendError::Io)?;
                        wbuf.clear();
                    }
                }
            }
        }
        record::header(wbuf, Kind::Stdin, 0);
        writer.write_all(wbuf).await.map_err(SendError::Io)
    };
    let mut sending = std::pin::pin!(sending);
    let mut reading = true;
    loop {
        tokio::select! {
            biased;
            sent = &mut sending => return match sent {
                Ok(()) => Ok(true),
                // The application may have answered and closed: what it said is read.
                Err(SendError::Io(_)) => Ok(false),
                Err(e) => Err(e),
            },
            read = reader.read_buf(rbuf), if reading => match read {
                Ok(n) if n > 0 && !record::holds_end(rbuf) => {
                    reading = rbuf.len() < READ_AHEAD;
                    make_room(rbuf);
                }
                // The answer is over (or the connection is): the head reader takes it.
                _ => return Ok(false),
            },
        }
    }
}

/// A CGI response's head, and how its body begins.
#[derive(Debug)]
pub(crate) struct Head {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Start,
}

/// The body after the head.
#[derive(Debug)]
pub(crate) enum Start {
    /// The whole answer came with the head; the connection, when it may be used again.
    Complete {
        body: Bytes,
        reusable: Option<Connection>,
    },
    /// The rest is still to be read.
    Streaming(ResponseBody),
}

/// Reads records until the CGI head (fields, then an empty line) is whole, and parses it.
pub(crate) async fn read_head(
    mut conn: Connection,
    keep: bool,
    log: LogAs,
) -> Result<Head, SendError> {
    let mut head = BytesMut::new();
    let max_head = conn.max_head;
    let mut answered = false;
    loop {
        match record::next(&mut conn.rbuf).map_err(SendError::Invalid)? {
            Some(Record::Stdout(data)) => {
                answered = true;
                head.extend_from_slice(&data);
                if let Some(end) = head_end(&head) {
                    let rest = head.split_off(end).freeze();
                    let (status, headers) = parse_head(&head)?;
                    return Ok(Head {
                        status,
                        headers,
                        body: start(conn, keep, log, rest),
                    });
                }
                if head.len() > max_head {
                    return Err(SendError::Invalid("a CGI response head over the limit"));
                }
            }
            Some(Record::Stderr(data)) => {
                answered = true;
                log.stderr(&data);
            }
            Some(Record::End { complete: true }) => {
                return Err(SendError::Invalid(
                    "the application ended without a CGI head",
                ));
            }
            Some(Record::End { complete: false }) => {
                return Err(SendError::Io(std::io::Error::other(
                    "the application refused the request (overloaded)",
                )));
            }
            None => {
                make_room(&mut conn.rbuf);
                match conn.stream.read_buf(&mut conn.rbuf).await {
                    Ok(0) if answered => {
                        return Err(SendError::Invalid("closed inside a CGI response"));
                    }
                    Ok(0) => {
                        return Err(SendError::Io(std::io::Error::new(
                            std::io::ErrorKind::UnexpectedEof,
                            "the application closed the connection without a response",
                        )));
                    }
                    Ok(_) => {}
                    Err(_) if answered => {
                        return Err(SendError::Invalid("broke inside a CGI response"));
                    }
                    Err(e) => return Err(SendError::Io(e)),
                }
            }
        }
    }
}

/// Room for the next read, grown (by [`READ`]) only when little is left.
fn make_room(buf: &mut BytesMut) {
    if buf.capacity() - buf.len() < MIN_ROOM {
        buf.reserve(READ);
    }
}

/// The end of a CGI head: after its empty line (CRLF or bare LF line ends).
fn head_end(head: &[u8]) -> Option<usize> {
    let crlf = memchr_pair(head, b"\r\n\r\n").map(|at| at + 4);
    let lf = memchr_pair(head, b"\n\n").map(|at| at + 2);
    match (crlf, lf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn memchr_pair(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// The status (`Status:`, else 302 for a `Location:`, else 200) and the fields, those
/// of the connection left out.
fn parse_head(head: &[u8]) -> Result<(StatusCode, HeaderMap), SendError> {
    let mut fields = [httparse::EMPTY_HEADER; MAX_FIELDS];
    let parsed = httparse::parse_headers(head, &mut fields)
        .map_err(|_| SendError::Invalid("an invalid CGI response head"))?;
    let httparse::Status::Complete((_, fields)) = parsed else {
        return Err(SendError::Invalid("an invalid CGI response head"));
    };
    let mut status = None;
    let mut headers = HeaderMap::with_capacity(fields.len());
    for field in fields {
        if field.name.eq_ignore_ascii_case("status") {
            let code = field.value.get(..3).unwrap_or_default();
            status = Some(
                StatusCode::from_bytes(code)
                    .ok()
                    .filter(|s| !s.is_informational())
                    .ok_or(SendError::Invalid("an invalid CGI Status field"))?,
            );
            continue;
        }
        let name = HeaderName::from_bytes(field.name.as_bytes())
            .map_err(|_| SendError::Invalid("an invalid CGI response field"))?;
        if crate::forward::is_hop_by_hop(&name) {
            continue;
        }
        let value = HeaderValue::from_bytes(field.value)
            .map_err(|_| SendError::Invalid("an invalid CGI response field"))?;
        headers.append(name, value);
    }
    let status = status.unwrap_or(if headers.contains_key(header::LOCATION) {
        StatusCode::FOUND
    } else {
        StatusCode::OK
    });
    Ok((status, headers))
}

/// The body after a head: whole when the records that end it have arrived already (most
/// small answers), else streamed from the connection.
fn start(mut conn: Connection, keep: bool, log: LogAs, first: Bytes) -> Start {
    let mut body = BytesMut::from(first);
    loop {
        match record::next(&mut conn.rbuf) {
            Ok(Some(Record::Stdout(data))) => body.extend_from_slice(&data),
            Ok(Some(Record::Stderr(data))) => log.stderr(&data),
            Ok(Some(Record::End { complete })) => {
                let reusable = (keep && complete && conn.rbuf.is_empty()).then_some(conn);
                return Start::Complete {
                    body: body.freeze(),
                    reusable,
                };
            }
            // Not whole yet, or broken: the streaming body reads on (and reports it).
            Ok(None) | Err(_) => {
                return Start::Streaming(ResponseBody {
                    conn: Some(conn),
                    pending: body.freeze(),
                    keep,
                    log,
                    home: None,
                });
            }
        }
    }
}

/// A CGI response body streamed from `FCGI_STDOUT` records.
///
/// At `FCGI_END_REQUEST` the connection goes back to its pool (when the application keeps
/// it); dropped before, the connection is closed with it.
#[derive(Debug)]
pub(crate) struct ResponseBody {
    conn: Option<Connection>,
    pending: Bytes,
    keep: bool,
    log: LogAs,
    home: Option<Home>,
}

impl ResponseBody {
    /// Gives the connection back to `home` at the end of the answer.
    pub(crate) fn returning_to(mut self, home: Home) -> Self {
        self.home = Some(home);
        self
    }
}

/// The application closed the connection before it ended its answer.
#[derive(Debug, thiserror::Error)]
#[error("the FastCGI application closed the connection inside its answer")]
struct Truncated;

impl http_body::Body for ResponseBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        if !this.pending.is_empty() {
            return Poll::Ready(Some(Ok(Frame::data(std::mem::take(&mut this.pending)))));
        }
        loop {
            let Some(conn) = this.conn.as_mut() else {
                return Poll::Ready(None);
            };
            match record::next(&mut conn.rbuf) {
                Ok(Some(Record::Stdout(data))) if data.is_empty() => {}
                Ok(Some(Record::Stdout(data))) => return Poll::Ready(Some(Ok(Frame::data(data)))),
                Ok(Some(Record::Stderr(data))) => this.log.stderr(&data),
                Ok(Some(Record::End { complete })) => {
                    if let (Some(conn), Some(home)) = (this.conn.take(), this.home.take())
                        && this.keep
                        && complete
                        && conn.rbuf.is_empty()
                    {
                        home.put(conn);
                    }
                    return Poll::Ready(None);
                }
                Ok(None) => {
                    make_room(&mut conn.rbuf);
                    let read = std::pin::pin!(conn.stream.read_buf(&mut conn.rbuf)).poll(cx);
                    match ready!(read) {
                        Ok(0) => {
                            this.conn = None;
                            return Poll::Ready(Some(Err(Truncated.into())));
                        }
                        Ok(_) => {}
                        Err(e) => {
                            this.conn = None;
                            return Poll::Ready(Some(Err(e.into())));
                        }
                    }
                }
                Err(why) => {
                    this.conn = None;
                    return Poll::Ready(Some(Err(why.into())));
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.conn.is_none() && self.pending.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cgi_heads_give_a_status_and_fields() {
        let (status, headers) =
            parse_head(b"Status: 404 Not Found\r\nContent-type: text/html\r\n\r\n").unwrap();
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert_eq!(headers["content-type"], "text/html");
        assert!(!headers.contains_key("status"));
        let (status, headers) = parse_head(b"Location: /login\nSet-Cookie: a=1\n\n").unwrap();
        assert_eq!(status, StatusCode::FOUND, "a Location without a Status");
        assert_eq!(headers["location"], "/login");
        let (status, headers) =
            parse_head(b"Content-Type: text/plain\r\nConnection: close\r\n\r\n").unwrap();
        assert_eq!(status, StatusCode::OK);
        assert!(!headers.contains_key("connection"));
        for bad in [
            &b"Status: abc\r\n\r\n"[..],
            b"Status: 100 Continue\r\n\r\n",
            b"Bad Field: x\r\n\r\n",
        ] {
            assert!(
                parse_head(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        assert_eq!(head_end(b"A: b\r\n\r\nbody"), Some(8));
        assert_eq!(head_end(b"A: b\n\nbody\r\n\r\n"), Some(6));
        assert_eq!(head_end(b"A: b\r\n"), None);
    }
}
