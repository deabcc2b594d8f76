//! The subrequest a request makes to the auth service, and what the answer means.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::uri::PathAndQuery;
use http::{Method, Request, Response, Uri, Version};
use http_body_util::BodyExt as _;
use scb_core::connection::{ClientCertificate, ConnectInfo};
use scb_core::original_uri::OriginalUri;
use scb_core::request_id::Id;
use scb_core::{Body, BoxError};

use crate::error::{InvalidResponse, ProxyError};
use crate::forward;
use crate::service::{ClientIp, ReverseProxy};

/// The original request's method, on the subrequest.
const X_FORWARDED_METHOD: HeaderName = HeaderName::from_static("x-forwarded-method");
/// The original request's path and query, on the subrequest.
const X_FORWARDED_URI: HeaderName = HeaderName::from_static("x-forwarded-uri");

/// The most of a 2xx answer's body read (and thrown away) so that its connection goes
/// back to the pool. Auth services answer 2xx with nothing or a word ("OK", "Authorized");
/// 64 KiB is far above that and still costs a worker nothing worth counting. Past it the
/// connection is closed instead: a pass that sends a lot is odd, not worth waiting for.
const DRAIN_MAX: usize = 64 * 1024;

/// What every clone of a layer and its services share.
#[derive(Debug)]
pub(super) struct Rules {
    /// The subrequest's target.
    pub(super) uri: PathAndQuery,
    /// The fields taken from a 2xx answer onto the request, and never from the client.
    pub(super) copy_headers: Box<[HeaderName]>,
}

/// What the auth service decided.
pub(super) enum Verdict {
    /// Through, with these fields (every value of each `copy_headers` field the answer
    /// had) added to the request.
    Pass(Vec<(HeaderName, HeaderValue)>),
    /// This response goes to the client instead: the auth service's own answer, or the
    /// proxy's (502, 504) when it could not be asked.
    Refuse(Response<Body>),
}

/// The check in progress. Boxed: it is [`ReverseProxy`]'s request loop (an `async fn`
/// whose future has no name) plus the reading of the answer, and the allocation is one
/// per request, as the proxy's own future is.
pub(super) type Check = Pin<Box<dyn Future<Output = Verdict> + Send>>;

/// Removes the client's copies of the `copy_headers` fields from `req`, then starts the
/// check for it.
pub(super) fn start<B>(proxy: &ReverseProxy, rules: &Arc<Rules>, req: &mut Request<B>) -> Check {
    // First, whatever comes next: neither the auth service nor, should the check
    // pass without setting them, the inner service may see a client's own claim.
    for name in &rules.copy_headers {
        req.headers_mut().remove(name);
    }
    let sub = subrequest(req, &rules.uri);
    let proxy = proxy.clone();
    let rules = Arc::clone(rules);
    Box::pin(async move { check(proxy, sub, &rules.copy_headers).await })
}

/// The subrequest for `req`: `GET uri` with no body, the original's fields but for the
/// hop-by-hop and body-framing ones, `X-Forwarded-Method` and `X-Forwarded-Uri`, and the
/// extensions the proxy reads. `X-Forwarded-For`, `-Proto` and `-Host` are the proxy's to
/// set (with its `trusted_proxies`), from the client's address and `Host` given here.
fn subrequest<B>(req: &Request<B>, uri: &PathAndQuery) -> Request<Body> {
    let original = req.headers();
    let skip = forward::hop_by_hop(original);
    let mut headers = HeaderMap::with_capacity(original.len() + 2);
    for (name, value) in original {
        // `Transfer-Encoding` and `Expect` are in the hop-by-hop list; with
        // `Content-Length` they are all the fields that announce a body, and the
        // subrequest has none.
        if name != header::CONTENT_LENGTH && !skip(name) {
            headers.append(name, value.clone());
        }
    }
    // An HTTP/2 request names its host in `:authority`, which the subrequest's target
    // (the auth uri) does not carry: as `Host`, it is also what the proxy sets
    // `X-Forwarded-Host` from.
    if !headers.contains_key(header::HOST)
        && let Some(authority) = req.uri().authority()
        && let Ok(host) = HeaderValue::from_str(authority.as_str())
    {
        headers.insert(header::HOST, host);
    }
    // Set over whatever the client sent, which would let it pick what the decision is
    // about. Neither value can fail to be a field value (the `http` crate admits no
    // control character in either); were one to, no claim is safer than a wrong one.
    // The client's URI, not one a rewrite or `try_files` inside the server made: the
    // auth service decides on what the client asked for.
    let asked = req
        .extensions()
        .get::<OriginalUri>()
        .map_or(req.uri(), |o| &o.0);
    let target = match asked.path_and_query() {
        Some(pq) => HeaderValue::from_bytes(pq.as_str().as_bytes()),
        // An authority-form target (`CONNECT host:port`) has no path: it is the target.
        None => HeaderValue::from_bytes(asked.to_string().as_bytes()),
    };
    for (name, value) in [
        (
            X_FORWARDED_METHOD,
            HeaderValue::from_bytes(req.method().as_str().as_bytes()),
        ),
        (X_FORWARDED_URI, target),
    ] {
        match value {
            Ok(value) => headers.insert(name, value),
            Err(_) => headers.remove(name),
        };
    }

    let mut sub = Request::new(Body::empty());
    *sub.method_mut() = Method::GET;
    *sub.uri_mut() = Uri::from(uri.clone());
    *sub.version_mut() = Version::HTTP_11;
    *sub.headers_mut() = headers;
    let from = req.extensions();
    let to = sub.extensions_mut();
    if let Some(info) = from.get::<ConnectInfo>() {
        to.insert(*info);
    }
    if let Some(ip) = from.get::<ClientIp>() {
        to.insert(*ip);
    }
    if let Some(id) = from.get::<Id>() {
        to.insert(id.clone());
    }
    // For a proxy built with `forward_client_cert`: an auth service may decide on the
    // certificate a mutual-TLS listener verified.
    if let Some(cert) = from.get::<ClientCertificate>() {
        to.insert(cert.clone());
    }
    sub
}

/// Sends `sub` through `proxy` and reads the verdict.
async fn check(proxy: ReverseProxy, sub: Request<Body>, copy: &[HeaderName]) -> Verdict {
    let id = sub.extensions().get::<Id>().cloned();
    let answer = match proxy.outbound(sub) {
        Ok(mut out) => proxy.forward(&mut out).await,
        Err(e) => Err(e),
    };
    match answer {
        Ok(answer) => verdict(answer, copy).await,
        Err(e) => {
            let status = e.status();
            let request_id = id.as_ref().map_or("-", Id::as_str);
            if status.is_server_error() {
                tracing::warn!(
                    request_id,
                    error = %e,
                    status = status.as_u16(),
                    "auth service unreachable: request refused"
                );
            } else {
                // The request itself cannot be checked (an invalid Host): the client's
                // fault, answered as the proxy answers it.
                tracing::debug!(request_id, error = %e, "forward auth refused the request");
            }
            Verdict::Refuse(e.into_response())
        }
    }
}

/// Only a 2xx answer lets the request through. Of its fields only `copy` are kept, as
/// nginx's `auth_request` and Caddy's `forward_auth` do: they are the answer's say about
/// the request, and the rest (`Set-Cookie`, `Content-Type`, ...) describe the answer
/// itself, which the client never sees.
async fn verdict(answer: Response<Body>, copy: &[HeaderName]) -> Verdict {
    let status = answer.status();
    if status.is_informational() {
        // The proxy's client skips interim answers and refuses a 101 it did not ask for,
        // so none should come here; the client gets no 1xx as a final answer either way.
        let e = ProxyError::Protocol(InvalidResponse("an interim answer as the final one"));
        return Verdict::Refuse(e.into_response());
    }
    if !status.is_success() {
        // 401 with its `WWW-Authenticate`, 302 to a login page, 403, or the auth
        // service's own 5xx: to the client as it came, body streamed.
        return Verdict::Refuse(answer);
    }
    let (parts, body) = answer.into_parts();
    let mut fields = Vec::new();
    for name in copy {
        for value in parts.headers.get_all(name) {
            fields.push((name.clone(), value.clone()));
        }
    }
    drain(body).await;
    Verdict::Pass(fields)
}

/// Reads a pass's body to its end, up to [`DRAIN_MAX`], so that the connection it came
/// on goes back to the pool (a body dropped unread closes it).
async fn drain<B>(body: B)
where
    B: http_body::Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    if body.is_end_stream() {
        return;
    }
    if let Err(e) = http_body_util::Limited::new(body, DRAIN_MAX)
        .collect()
        .await
    {
        // The verdict came with the head; what follows it does not change it.
        tracing::debug!(error = %e, "forward auth: a 2xx answer's body was not read whole");
    }
}
