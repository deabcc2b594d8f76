//! Request-head encoding for the upstream client.

use http::{Method, Request, header};
use http_body::Body as _;
use scb_core::{Body, BoxError};

/// How the request body is framed on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum BodyFraming {
    Empty,
    Length(u64),
    Chunked,
}

/// Appends `req`'s request line and header section to `dst`.
///
/// The fields go as they are: the proxy has already made them what the upstream should see
/// (hop-by-hop fields out, forwarding fields in). A declared Content-Length frames the
/// body (the writer holds the body to it); a body of unknown length is chunked; an empty
/// POST, PUT or PATCH without a length gets `content-length: 0`, which some upstreams
/// require (411 otherwise).
pub(super) fn encode_head(dst: &mut Vec<u8>, req: &Request<Body>) -> Result<BodyFraming, BoxError> {
    let method = req.method();
    dst.extend_from_slice(method.as_str().as_bytes());
    dst.push(b' ');
    dst.extend_from_slice(
        req.uri()
            .path_and_query()
            .map_or("/", |pq| pq.as_str())
            .as_bytes(),
    );
    dst.extend_from_slice(b" HTTP/1.1\r\n");
    for (name, value) in req.headers() {
        dst.extend_from_slice(name.as_str().as_bytes());
        dst.extend_from_slice(b": ");
        dst.extend_from_slice(value.as_bytes());
        dst.extend_from_slice(b"\r\n");
    }
    let mut lengths = req.headers().get_all(header::CONTENT_LENGTH).iter();
    let declared = match (lengths.next(), lengths.next()) {
        (None, _) => None,
        (Some(value), None) => Some(
            scb_core::http1::parse_content_length(value.as_bytes())
                .ok_or("invalid Content-Length")?,
        ),
        // Which one the upstream would believe is a guess: refused, as scb's server does.
        (Some(_), Some(_)) => return Err("several Content-Length fields".into()),
    };
    let framing = match declared {
        Some(0) => BodyFraming::Empty,
        Some(len) => BodyFraming::Length(len),
        None if req.body().is_end_stream() => {
            if matches!(*method, Method::POST | Method::PUT | Method::PATCH) {
                dst.extend_from_slice(b"content-length: 0\r\n");
            }
            BodyFraming::Empty
        }
        None => {
            dst.extend_from_slice(b"transfer-encoding: chunked\r\n");
            BodyFraming::Chunked
        }
    };
    dst.extend_from_slice(b"\r\n");
    Ok(framing)
}
