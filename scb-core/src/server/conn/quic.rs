//! HTTP/3 (RFC 9114) over QUIC, with `quinn` and `h3`: the third way into the same
//! per-worker service, beside scb's HTTP/1.1 driver and hyper's HTTP/2.
//!
//! Each worker owns a UDP socket (`SO_REUSEPORT`, on the port of the TCP listener it
//! belongs to) and a QUIC endpoint on its own runtime; connections and their streams are
//! served with `spawn_local`, so the service need not be `Send`. The kernel hands the
//! datagrams of one 4-tuple to one socket, so a connection stays on the worker that
//! accepted it while the client's address stays the same; when it changes, the
//! connection IDs steer its datagrams back (`worker::steer`).
//!
//! A request's body streams from the QUIC stream to the service (bounded by
//! [`Limits::max_body_bytes`](crate::server::Limits) and its read timeout, trailers
//! included); a response's body is polled frame by frame and sent as DATA frames (there
//! is no `sendfile` on QUIC: a file region is read), its trailers as a trailing HEADERS
//! frame. A HEAD answer sends the head alone. Shutdown sends GOAWAY and lets the
//! requests in flight finish.

use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use http::{Method, Request, Response, StatusCode};
use http_body::{Frame, SizeHint};
use tokio::time::Instant;

use super::service::{ConnService, ResponseBody};
use super::{ConnCtx, Peer, call_service, error_response};
use crate::connection::{ConnectInfo, TlsInfo};
use crate::{Body, BoxError};

type QuicConnection = h3_quinn::Connection;
type RecvStream = h3::server::RequestStream<h3_quinn::RecvStream, Bytes>;
type SendStream = h3::server::RequestStream<h3_quinn::SendStream<Bytes>, Bytes>;

/// Serves one QUIC connection until it closes: its handshake (bounded by the handshake
/// timeout), then its requests, each on a task of its own.
pub(crate) async fn serve_quic<S, B>(
    incoming: quinn::Incoming,
    local: std::net::SocketAddr,
    certificate: Option<crate::server::ParseCertificate>,
    handshake: impl Sized,
    svc: S,
    ctx: Rc<ConnCtx>,
) where
    S: ConnService<B>,
    B: ResponseBody,
{
    let remote = incoming.remote_address();
    let connecting = match incoming.accept() {
        Ok(connecting) => connecting,
        Err(e) => {
            tracing::debug!(peer = %remote, error = %e, "QUIC connection refused");
            return;
        }
    };
    let conn = match tokio::time::timeout(ctx.limits.handshake_timeout, connecting).await {
        Ok(Ok(conn)) => conn,
        Ok(Err(e)) => {
            tracing::debug!(peer = %remote, error = %e, "QUIC handshake failed");
            return;
        }
        Err(_) => {
            tracing::debug!(peer = %remote, "QUIC handshake timed out");
            return;
        }
    };
    drop(handshake);
    let mut peer = Peer::plain(ConnectInfo {
        remote,
        local,
        secure: true,
    });
    // QUIC runs TLS 1.3 only (RFC 9001 §4.2); quinn does not tell the suite.
    peer.tls = Some(TlsInfo::new("TLSv1.3", None));
    if let Some(parse) = certificate {
        peer.cert = conn
            .peer_identity()
            .and_then(|id| {
                id.downcast::<Vec<quinn::rustls::pki_types::CertificateDer<'static>>>()
                    .ok()
            })
            .and_then(|chain| chain.first().and_then(|der| parse(der)));
    }
    let max_field_section = u64::try_from(ctx.limits.max_header_bytes).unwrap_or(u64::MAX);
    let mut h3 = match h3::server::builder()
        .max_field_section_size(max_field_section)
        .build::<QuicConnection, Bytes>(h3_quinn::Connection::new(conn))
        .await
    {
        Ok(h3) => h3,
        Err(e) => {
            tracing::debug!(peer = %remote, error = %e, "HTTP/3 connection setup failed");
            return;
        }
    };
    let mut shutting_down = false;
    loop {
        let accepted = tokio::select! {
            accepted = h3.accept() => accepted,
            () = ctx.shutdown.fired(), if !shutting_down => {
                shutting_down = true;
                // GOAWAY: the client sends no new requests; those in flight finish.
                if let Err(e) = h3.shutdown(0).await {
                    tracing::debug!(peer = %remote, error = %e, "HTTP/3 GOAWAY failed");
                }
                continue;
            }
        };
        match accepted {
            Ok(Some(resolver)) => {
                let svc = svc.clone();
                let ctx = Rc::clone(&ctx);
                let peer = peer.clone();
                // Boxed where it is made: the request's future holds the service's, and
                // moving it into the task by value copied kilobytes per request.
                tokio::task::spawn_local(Box::pin(async move {
                    match resolver.resolve_request().await {
                        Ok((req, stream)) => serve_request(req, stream, peer, svc, &ctx).await,
                        Err(e) => {
                            tracing::debug!(error = %e, "HTTP/3 request refused");
                        }
                    }
                }));
            }
            Ok(None) => break,
            Err(e) => {
                if !e.is_h3_no_error() {
                    tracing::debug!(peer = %remote, error = %e, "HTTP/3 connection ended with an error");
                }
                break;
            }
        }
    }
}

async fn serve_request<S, B>(
    req: Request<()>,
    stream: h3::server::RequestStream<h3_quinn::BidiStream<Bytes>, Bytes>,
    peer: Peer,
    mut svc: S,
    ctx: &ConnCtx,
) where
    S: ConnService<B>,
    B: ResponseBody,
{
    let (mut send, recv) = stream.split();
    let limits = &ctx.limits;
    let head = req.method() == Method::HEAD;
    let declared = req
        .headers()
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let res = if let Some(field) = connection_specific(req.headers()) {
        // RFC 9114 §4.2: malformed; the server may answer before closing the stream.
        error_response(
            StatusCode::BAD_REQUEST,
            &format!("connection-specific field {field} in an HTTP/3 request"),
            &ctx.request_id_header,
            false,
        )
    } else if declared.is_some_and(|len| len > limits.max_body_bytes) {
        error_response(
            StatusCode::PAYLOAD_TOO_LARGE,
            "request body too large",
            &ctx.request_id_header,
            false,
        )
    } else {
        let deadline = Instant::now() + limits.body_read_timeout;
        let body = Body::new(RecvBody {
            recv,
            left: limits.max_body_bytes,
            declared,
            deadline: Box::pin(tokio::time::sleep_until(deadline)),
            data_done: false,
            done: false,
        });
        let mut req = req.map(|()| body);
        peer.stamp(&mut req);
        match call_service(&mut svc, req).await {
            Ok(res) => {
                if let Err(e) = send_response(&mut send, res, head).await {
                    tracing::debug!(error = %e, "HTTP/3 response not sent whole");
                }
                return;
            }
            Err(failed) => failed.response(&ctx.request_id_header),
        }
    };
    ctx.count_answer(None, &res);
    if let Err(e) = send_response(&mut send, res, head).await {
        tracing::debug!(error = %e, "HTTP/3 response not sent whole");
    }
}

/// The first connection-specific field of a request, which HTTP/3 forbids (RFC 9114
/// §4.2): `TE` is allowed only as `trailers`.
fn connection_specific(headers: &http::HeaderMap) -> Option<&'static str> {
    const FORBIDDEN: [&str; 5] = [
        "connection",
        "keep-alive",
        "proxy-connection",
        "transfer-encoding",
        "upgrade",
    ];
    if let Some(name) = FORBIDDEN
        .into_iter()
        .find(|name| headers.contains_key(*name))
    {
        return Some(name);
    }
    headers
        .get_all(http::header::TE)
        .iter()
        .any(|v| !v.as_bytes().eq_ignore_ascii_case(b"trailers"))
        .then_some("te")
}

/// Sends `res` on `send`: its head, then its body's frames (none for a HEAD), then the
/// end of the stream.
async fn send_response<B>(
    send: &mut SendStream,
    res: Response<B>,
    head: bool,
) -> Result<(), BoxError>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    let (mut parts, body) = res.into_parts();
    // Connection-specific fields have no meaning in HTTP/3 (RFC 9114 §4.2): a message
    // carrying one is malformed.
    for name in [
        http::header::CONNECTION,
        http::header::TRANSFER_ENCODING,
        http::header::UPGRADE,
        http::header::HeaderName::from_static("keep-alive"),
        http::header::HeaderName::from_static("proxy-connection"),
    ] {
        parts.headers.remove(name);
    }
    // 1xx, 204 and 304 have no content, and a length of 0 on a 304 would claim the
    // resource is empty (RFC 9110 §8.6).
    let no_content = parts.status.is_informational()
        || parts.status == StatusCode::NO_CONTENT
        || parts.status == StatusCode::NOT_MODIFIED;
    if let Some(len) = body.size_hint().exact()
        && !no_content
        && !parts.headers.contains_key(http::header::CONTENT_LENGTH)
        && !(head && len == 0)
    {
        parts
            .headers
            .insert(http::header::CONTENT_LENGTH, len.into());
    }
    send.send_response(Response::from_parts(parts, ())).await?;
    if !head {
        let mut body = std::pin::pin!(body);
        while let Some(frame) = std::future::poll_fn(|cx| body.as_mut().poll_frame(cx)).await {
            let frame = frame.map_err(Into::into)?;
            match frame.into_data() {
                Ok(data) => {
                    if !data.is_empty() {
                        send.send_data(data).await?;
                    }
                }
                Err(frame) => {
                    if let Ok(trailers) = frame.into_trailers() {
                        // Trailers end the message; the stream still needs its FIN.
                        send.send_trailers(trailers).await?;
                        break;
                    }
                }
            }
        }
    }
    send.finish().await?;
    Ok(())
}

/// A request's body as it arrives on its QUIC stream, at most `left` bytes, by the
/// deadline.
struct RecvBody {
    recv: RecvStream,
    left: u64,
    /// The request's `Content-Length`, which the DATA frames must add up to: what is
    /// left of it.
    declared: Option<u64>,
    deadline: Pin<Box<tokio::time::Sleep>>,
    /// The DATA frames have ended: what is left is the trailers, if any.
    data_done: bool,
    done: bool,
}

impl http_body::Body for RecvBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if self.done {
            return Poll::Ready(None);
        }
        if self.deadline.as_mut().poll(cx).is_ready() {
            self.done = true;
            return Poll::Ready(Some(Err(super::body::BodyError::Timeout.into())));
        }
        if !self.data_done {
            match self.recv.poll_recv_data(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Ok(Some(mut data))) => {
                    let len = data.remaining() as u64;
                    if len > self.left {
                        self.done = true;
                        self.recv
                            .stop_sending(h3::error::Code::H3_REQUEST_CANCELLED);
                        return Poll::Ready(Some(Err(super::body::BodyError::TooLarge.into())));
                    }
                    self.left -= len;
                    if let Some(declared) = &mut self.declared {
                        if len > *declared {
                            self.done = true;
                            self.recv.stop_sending(h3::error::Code::H3_MESSAGE_ERROR);
                            return Poll::Ready(Some(Err(
                                super::body::BodyError::LengthMismatch.into()
                            )));
                        }
                        *declared -= len;
                    }
                    let bytes = data.copy_to_bytes(data.remaining());
                    return Poll::Ready(Some(Ok(Frame::data(bytes))));
                }
                // h3 keeps trailers that came for `poll_recv_trailers`; polling for
                // data again would wait for a frame that never comes.
                Poll::Ready(Ok(None)) => {
                    if self.declared.is_some_and(|left| left > 0) {
                        self.done = true;
                        return Poll::Ready(Some(Err(
                            super::body::BodyError::LengthMismatch.into()
                        )));
                    }
                    self.data_done = true;
                }
                Poll::Ready(Err(e)) => {
                    self.done = true;
                    return Poll::Ready(Some(Err(e.into())));
                }
            }
        }
        match self.recv.poll_recv_trailers(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Ok(trailers)) => {
                self.done = true;
                Poll::Ready(trailers.map(|t| Ok(Frame::trailers(t))))
            }
            Poll::Ready(Err(e)) => {
                self.done = true;
                Poll::Ready(Some(Err(e.into())))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}
