//! A stored response as the answer to a request: its head with the `Age` it has now,
//! the client's preconditions evaluated against it (304, 412), its ranges (206, 416),
//! and no body for a HEAD.
//!
//! The rules are scb-core's, the same that static files answer by
//! ([`scb_core::conditional`], [`scb_core::range`]), against the stored validators.

use std::time::SystemTime;

use bytes::BytesMut;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::response::Parts;
use http::{Method, Response, StatusCode};
use scb_core::Body;
use scb_core::conditional::{Precondition, Validators, evaluate_validators};
use scb_core::http1::has_any;
use scb_core::range::{self, Boundary, Ranges};

use super::policy::copy_head;
use super::store::Entry;
use super::stored::StoredBody;

/// The `Cache-Status` header (RFC 9211).
pub(crate) const CACHE_STATUS: HeaderName = HeaderName::from_static("cache-status");

/// How many ranges one request may ask of a stored response, as for static files.
const MAX_RANGES: usize = 16;

/// Fields a 304 leaves out: they describe a body it does not have.
const NOT_IN_304: [HeaderName; 3] = [
    header::CONTENT_LENGTH,
    header::CONTENT_RANGE,
    header::CONTENT_TYPE,
];

/// The `Cache-Status` of a fresh hit, which [`hit_headers`] sets.
pub(crate) const HIT: &str = "scb; hit";

/// Request fields that change what a stored response answers (a 304, a 412, a 206): a
/// request with none of them takes the hit's pre-built head as it is.
const ANSWER_CHANGING: [HeaderName; 5] = [
    header::RANGE,
    header::IF_NONE_MATCH,
    header::IF_MODIFIED_SINCE,
    header::IF_MATCH,
    header::IF_UNMODIFIED_SINCE,
];

/// `entry` answering a request of `method` with `headers`, marked `status`.
pub(crate) fn from_entry(
    method: &Method,
    headers: &HeaderMap,
    entry: &Entry,
    now: SystemTime,
    status: &str,
) -> Response<Body> {
    let age = HeaderValue::from(entry.policy.age(now).as_secs());
    if status == HIT && !has_any(headers, &ANSWER_CHANGING) {
        // The common hit: one map, sized once, and no precondition or range to weigh.
        let mut res = Response::new(if method == Method::HEAD {
            Body::empty()
        } else {
            entry.body.whole()
        });
        *res.status_mut() = entry.head.status;
        *res.version_mut() = entry.head.version;
        *res.headers_mut() = hit_headers(entry, age);
        return res;
    }
    let mut head = copy_head(&entry.head);
    head.headers.insert(header::AGE, age);
    let mut res = respond(method, headers, head, &entry.body);
    set_status(&mut res, status);
    res
}

/// The head of a plain fresh hit: the stored fields with `Content-Length`,
/// `Accept-Ranges` (a 200), `Age` and `Cache-Status: scb; hit`, in a map sized for
/// them all at once (it never grows while being filled).
pub(crate) fn hit_headers(entry: &Entry, age: HeaderValue) -> HeaderMap {
    let mut headers = HeaderMap::with_capacity(entry.head.headers.len() + 4);
    for (name, value) in &entry.head.headers {
        headers.append(name, value.clone());
    }
    if entry.head.status == http::StatusCode::OK {
        headers.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    }
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(entry.body.len()));
    headers.insert(header::AGE, age);
    headers.insert(CACHE_STATUS, HeaderValue::from_static("scb; hit"));
    headers
}

/// `head` and `body` (a stored or just received representation) as the answer to a
/// request of `method` with `headers`.
pub(crate) fn respond(
    method: &Method,
    headers: &HeaderMap,
    mut head: Parts,
    body: &StoredBody,
) -> Response<Body> {
    let len = body.len();
    let head_only = method == Method::HEAD;
    if head.status.is_success() {
        let validators = Validators::of(&head.headers);
        match evaluate_validators(method, headers, validators) {
            Precondition::Proceed => {}
            Precondition::NotModified => {
                head.status = StatusCode::NOT_MODIFIED;
                for name in &NOT_IN_304 {
                    head.headers.remove(name);
                }
                return Response::from_parts(head, Body::empty());
            }
            Precondition::Failed => {
                return scb_core::respond::reason(StatusCode::PRECONDITION_FAILED);
            }
        }
    }
    if head.status == StatusCode::OK {
        head.headers
            .insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
        let validators = Validators::of(&head.headers);
        match range::for_request_validators(method, headers, len, validators, MAX_RANGES) {
            Ranges::Full => {}
            Ranges::Satisfiable(ranges) => {
                if let [one] = ranges.as_slice() {
                    let (offset, part_len) = bounds(*one, len);
                    head.status = StatusCode::PARTIAL_CONTENT;
                    head.headers
                        .insert(header::CONTENT_RANGE, range::content_range(*one, len));
                    head.headers
                        .insert(header::CONTENT_LENGTH, HeaderValue::from(part_len));
                    let part = if head_only {
                        Body::empty()
                    } else {
                        body.part(offset, part_len)
                    };
                    return Response::from_parts(head, part);
                }
                let framing = range::multipart(
                    &ranges,
                    len,
                    head.headers.get(header::CONTENT_TYPE),
                    Boundary::random(),
                );
                let mut out = BytesMut::with_capacity(
                    usize::try_from(framing.content_length).unwrap_or_default(),
                );
                let mut read = Ok(());
                for part in &framing.parts {
                    let (offset, part_len) = bounds(part.range, len);
                    out.extend_from_slice(&part.head);
                    match body.read(offset, part_len) {
                        Ok(bytes) => out.extend_from_slice(&bytes),
                        Err(e) => read = Err(e),
                    }
                }
                out.extend_from_slice(&framing.closing);
                // A part that cannot be read: the ranges are ignored (RFC 9110 14.2 lets
                // a server), and the whole body answers.
                if read.is_ok() {
                    head.status = StatusCode::PARTIAL_CONTENT;
                    head.headers
                        .insert(header::CONTENT_TYPE, framing.content_type.clone());
                    head.headers
                        .insert(header::CONTENT_LENGTH, HeaderValue::from(out.len()));
                    let part = if head_only {
                        Body::empty()
                    } else {
                        Body::full(out.freeze())
                    };
                    return Response::from_parts(head, part);
                }
            }
            Ranges::Unsatisfiable => {
                let mut res = scb_core::respond::reason(StatusCode::RANGE_NOT_SATISFIABLE);
                res.headers_mut()
                    .insert(header::CONTENT_RANGE, range::unsatisfied_content_range(len));
                return res;
            }
        }
    }
    head.headers
        .insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    let body = if head_only {
        Body::empty()
    } else {
        body.whole()
    };
    Response::from_parts(head, body)
}

/// The offset and length of `range` within a body of `len` bytes.
fn bounds(range: range::ByteRange, len: u64) -> (u64, u64) {
    let start = range.start.min(len);
    let end = range.end_inclusive.saturating_add(1).min(len);
    (start, end.saturating_sub(start))
}

pub(crate) fn set_status(res: &mut Response<Body>, status: &str) {
    if let Ok(value) = HeaderValue::from_str(status) {
        res.headers_mut().insert(CACHE_STATUS, value);
    }
}
