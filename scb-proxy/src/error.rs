//! Every way a proxied request can fail, and the one place each becomes a status.

use http::header::{self, HeaderValue};
use http::{Response, StatusCode};
use scb_core::Body;

use crate::metrics::ErrorKind;

/// Why the proxy answered instead of an upstream.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// Every upstream is down (or was tried already).
    #[error("no upstream available")]
    NoUpstream,
    /// Connecting failed (refused, unreachable).
    #[error("connecting to the upstream failed: {0}")]
    Connect(#[source] std::io::Error),
    /// Connecting took longer than `connect_timeout`.
    #[error("connecting to the upstream timed out")]
    ConnectTimeout,
    /// No response head within `response_timeout`.
    #[error("the upstream did not answer in time")]
    ResponseTimeout,
    /// The tries together took longer than `try_timeout`.
    #[error("the upstream tries ran out of time")]
    TryTimeout,
    /// The connection broke before a response head.
    #[error("the upstream connection broke: {0}")]
    Reset(#[source] std::io::Error),
    /// The upstream's answer is not a valid HTTP/1.1 response, or one scb refuses to pass
    /// on (both Content-Length and Transfer-Encoding, oversized head).
    #[error("invalid upstream response: {0}")]
    Protocol(InvalidResponse),
    /// The request body is larger than `max_body`.
    #[error("request body too large")]
    BodyTooLarge,
    /// The client's request body broke off or stalled.
    #[error("the request body failed")]
    RequestBody,
    /// The request's Host (or authority) is not `host[:port]`: nothing is forwarded.
    #[error("invalid host")]
    InvalidHost,
}

/// Why an upstream's response was refused, in words for logs and the 502's reason.
/// Opaque on purpose: what a caller acts on is that it is [`ProxyError::Protocol`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidResponse(pub(crate) &'static str);

impl InvalidResponse {
    /// The reason, such as `several Content-Length fields`.
    pub fn reason(&self) -> &'static str {
        self.0
    }
}

impl ProxyError {
    /// The status the client gets.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::ConnectTimeout | Self::ResponseTimeout | Self::TryTimeout => {
                StatusCode::GATEWAY_TIMEOUT
            }
            Self::BodyTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Self::RequestBody | Self::InvalidHost => StatusCode::BAD_REQUEST,
            Self::NoUpstream | Self::Connect(_) | Self::Reset(_) | Self::Protocol(_) => {
                StatusCode::BAD_GATEWAY
            }
        }
    }

    /// The kind counted in `scb_upstream_errors_total`, for failures of an upstream (not
    /// of the client or of the proxy's own budget).
    pub(crate) fn kind(&self) -> Option<ErrorKind> {
        match self {
            Self::Connect(_) => Some(ErrorKind::Connect),
            Self::ConnectTimeout => Some(ErrorKind::ConnectTimeout),
            Self::ResponseTimeout => Some(ErrorKind::ResponseTimeout),
            Self::Reset(_) => Some(ErrorKind::Reset),
            Self::Protocol(_) => Some(ErrorKind::Protocol),
            Self::NoUpstream
            | Self::TryTimeout
            | Self::BodyTooLarge
            | Self::RequestBody
            | Self::InvalidHost => None,
        }
    }

    /// The response for this error: its status and a one-line reason. The request-id
    /// layer outside adds the id.
    pub fn into_response(self) -> Response<Body> {
        let status = self.status();
        let mut res = scb_core::respond::reason(status);
        if status == StatusCode::PAYLOAD_TOO_LARGE || status == StatusCode::BAD_REQUEST {
            // The rest of the body is unread: the connection cannot carry another request.
            res.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        res
    }

    /// The gRPC status code a gRPC client gets for this error: UNAVAILABLE (14) when no
    /// upstream answered, DEADLINE_EXCEEDED (4) for timeouts, RESOURCE_EXHAUSTED (8) for a
    /// body over the limit, INTERNAL (13) for a broken request (gRPC's own mapping of
    /// 400).
    pub fn grpc_status(&self) -> u8 {
        match self {
            Self::ConnectTimeout | Self::ResponseTimeout | Self::TryTimeout => 4,
            Self::BodyTooLarge => 8,
            Self::RequestBody | Self::InvalidHost => 13,
            Self::NoUpstream | Self::Connect(_) | Self::Reset(_) | Self::Protocol(_) => 14,
        }
    }

    /// The response for this error to a gRPC client: what gRPC calls trailers-only, HTTP
    /// 200 with `grpc-status` and `grpc-message` in the head and no body. A gRPC client
    /// given an HTTP error page reports a bare protocol failure instead of the cause.
    pub fn into_grpc_response(self) -> Response<Body> {
        let mut res = Response::new(Body::empty());
        let headers = res.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/grpc"),
        );
        headers.insert(
            "grpc-status",
            HeaderValue::from(u16::from(self.grpc_status())),
        );
        if let Ok(message) = HeaderValue::try_from(grpc_message(&self.to_string())) {
            headers.insert("grpc-message", message);
        }
        res
    }
}

/// `message` percent-encoded as gRPC's `grpc-message` wants it: bytes outside visible
/// ASCII and space (controls, and every non-ASCII byte), and `%` itself, as `%XX`.
fn grpc_message(message: &str) -> String {
    const GRPC_MESSAGE: &percent_encoding::AsciiSet = &percent_encoding::CONTROLS.add(b'%');
    percent_encoding::utf8_percent_encode(message, GRPC_MESSAGE).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_clients_get_a_status_and_an_encoded_message() {
        let res = ProxyError::ConnectTimeout.into_grpc_response();
        assert_eq!(res.status(), StatusCode::OK);
        assert_eq!(res.headers()["content-type"], "application/grpc");
        assert_eq!(res.headers()["grpc-status"], "4");
        assert_eq!(
            res.headers()["grpc-message"],
            "connecting to the upstream timed out"
        );
        assert_eq!(
            ProxyError::NoUpstream.into_grpc_response().headers()["grpc-status"],
            "14"
        );
        assert_eq!(ProxyError::BodyTooLarge.grpc_status(), 8);
        assert_eq!(
            grpc_message("50% d\u{e9}j\u{e0}\n"),
            "50%25 d%C3%A9j%C3%A0%0A"
        );
    }
}
