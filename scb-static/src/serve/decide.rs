//! From a request to a response, synchronously: the whole decision of a static-file
//! request in one function, run inline on the worker (entries from the open-file cache, or
//! looked up from the kernel's caches) and, when the kernel says a lookup or read would
//! block, once more on the blocking pool.

use http::header::{self, HeaderMap, HeaderValue};
use http::request::Parts;
use http::{Method, Response, StatusCode, Uri};
use scb_core::Body;

use super::chain::Chain;
use super::config::Config;
use super::entry::{Entry, Probe, Variant, WouldBlock};
use super::listing;
use super::lookup::Resolver;
use crate::encoding::{self, Candidates, Coding};
use crate::path::{self, PathError};
use scb_core::conditional::{self, Precondition};
use scb_core::range::{self, Boundary, Ranges};

/// Answers one request. `Err(WouldBlock)` only when `resolver` may not wait for the disk.
/// `not_found_page`: whether a 404 may send the configured page (the layer form throws
/// 404s away).
pub(crate) fn decide(
    config: &Config,
    req: &Parts,
    not_found_page: bool,
    resolver: &mut Resolver<'_>,
) -> Result<Response<Body>, WouldBlock> {
    let method = &req.method;
    if method != Method::GET && method != Method::HEAD {
        let mut res = no_file(StatusCode::METHOD_NOT_ALLOWED);
        res.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return Ok(res);
    }
    let page = config.not_found.as_deref().filter(|_| not_found_page);
    let path = match path::normalize(req.uri.path()) {
        Ok(p) => p,
        Err(PathError::Malformed) => return Ok(status(StatusCode::BAD_REQUEST)),
        Err(PathError::Escapes) => return not_found(config, page, method, resolver),
    };
    if path.hidden && !config.show_hidden {
        return not_found(config, page, method, resolver);
    }
    let candidates = if config.precompressed.is_empty() {
        Candidates::IDENTITY_ONLY
    } else {
        encoding::negotiate_all(
            req.headers.get_all(header::ACCEPT_ENCODING),
            &config.precompressed,
        )
    };

    let rel = &*path.rel;
    let entry = resolver.entry(config, rel, &candidates)?;
    let selected = select(&entry, &candidates);
    if let Some(res) = answer(config, req, &entry, &selected) {
        return Ok(res);
    }
    if matches!(selected, Selected::Dir) {
        if !path.trailing_slash {
            return Ok(redirect_to_directory(&req.uri));
        }
        if let Some(index) = &config.index {
            let index = if rel.is_empty() {
                index.clone()
            } else {
                format!("{rel}/{index}")
            };
            let entry = resolver.entry(config, &index, &candidates)?;
            let selected = select(&entry, &candidates);
            if let Some(res) = answer(config, req, &entry, &selected) {
                return Ok(res);
            }
            if matches!(selected, Selected::Dir) {
                // An "index" that is itself a directory is no index.
                return not_found(config, page, method, resolver);
            }
        }
        return if !candidates.identity_acceptable() {
            Ok(status(StatusCode::NOT_ACCEPTABLE))
        } else if config.list_directories {
            listing::listing_response(config, method, rel, resolver.mode())
        } else {
            not_found(config, page, method, resolver)
        };
    }
    if let Some(fallback) = &config.fallback
        && entry.names_nothing()
    {
        return serve_fallback(config, fallback, page, req, &candidates, resolver);
    }
    if candidates.identity_acceptable() {
        not_found(config, page, method, resolver)
    } else {
        Ok(status(StatusCode::NOT_ACCEPTABLE))
    }
}

/// What a request gets of an entry, given what its client accepts.
enum Selected<'e> {
    /// This variant: a sidecar in the negotiated order, else the file itself when identity
    /// is acceptable.
    Variant(&'e Variant, Option<Coding>),
    /// A directory (redirect, index, listing).
    Dir,
    /// There, but the server may not read it: 403, as nginx answers. An escape beneath
    /// the root is [`Missing`](Self::Missing), not this: the client learns nothing about
    /// what lies outside.
    Forbidden,
    /// The server ran out of descriptors or memory looking: 503.
    Unavailable,
    /// Nothing this client may have: 404, or 406 when only identity was missing.
    Missing,
}

/// The answer a selection makes by itself, wherever the entry was found: the file (or its
/// sidecar), 403 or 503. `None` for a directory or nothing, which depend on where.
fn answer(
    config: &Config,
    req: &Parts,
    entry: &Entry,
    selected: &Selected<'_>,
) -> Option<Response<Body>> {
    match *selected {
        Selected::Variant(variant, coding) => Some(file_response(
            config,
            &req.method,
            &req.headers,
            entry,
            variant,
            coding,
        )),
        Selected::Forbidden => Some(status(StatusCode::FORBIDDEN)),
        Selected::Unavailable => Some(unavailable()),
        Selected::Dir | Selected::Missing => None,
    }
}

fn select<'e>(entry: &'e Entry, candidates: &Candidates) -> Selected<'e> {
    if matches!(entry.found, Probe::Dir) {
        return Selected::Dir;
    }
    for &coding in candidates.codings() {
        if let Some(Probe::File(variant)) = entry.sidecar(coding) {
            return Selected::Variant(variant, Some(coding));
        }
    }
    match &entry.found {
        Probe::File(variant) if candidates.identity_acceptable() => {
            Selected::Variant(variant, None)
        }
        Probe::Forbidden => Selected::Forbidden,
        Probe::Unavailable => Selected::Unavailable,
        _ => Selected::Missing,
    }
}

/// The SPA fallback `file`, served as itself (validators, sidecars, conditionals,
/// ranges) with the status any file gets, and without [`NoFile`]: the app owns the path.
fn serve_fallback(
    config: &Config,
    file: &str,
    page: Option<&str>,
    req: &Parts,
    candidates: &Candidates,
    resolver: &mut Resolver<'_>,
) -> Result<Response<Body>, WouldBlock> {
    let entry = resolver.entry(config, file, candidates)?;
    match select(&entry, candidates) {
        Selected::Variant(variant, coding) => Ok(file_response(
            config,
            &req.method,
            &req.headers,
            &entry,
            variant,
            coding,
        )),
        Selected::Missing if !candidates.identity_acceptable() => {
            Ok(status(StatusCode::NOT_ACCEPTABLE))
        }
        Selected::Unavailable => Ok(unavailable()),
        _ => not_found(config, page, &req.method, resolver),
    }
}

/// A 404 marked [`NoFile`]: the bytes of the not-found `page` with its content type when
/// there is one, else the plain 404. No validators, ranges or 304 for the page: the
/// response is about the URL asked for, not about the page file. For the same reason no
/// Cache-Control rule applies: a rule for `*.html` such as `immutable` would pin the 404
/// of a URL that may exist tomorrow.
fn not_found(
    config: &Config,
    page: Option<&str>,
    method: &Method,
    resolver: &mut Resolver<'_>,
) -> Result<Response<Body>, WouldBlock> {
    let Some(page) = page else {
        return Ok(no_file(StatusCode::NOT_FOUND));
    };
    let entry = resolver.entry(config, page, &Candidates::IDENTITY_ONLY)?;
    let Probe::File(variant) = &entry.found else {
        return Ok(no_file(StatusCode::NOT_FOUND));
    };
    let mut h = HeaderMap::with_capacity(8);
    h.insert(header::CONTENT_TYPE, entry.content_type.clone());
    h.insert(header::CONTENT_LENGTH, variant.content_length.clone());
    let body = if method == Method::HEAD {
        Body::empty()
    } else {
        variant.body(0, variant.len)
    };
    let mut res = assemble(StatusCode::NOT_FOUND, h, body);
    res.extensions_mut().insert(NoFile);
    Ok(res)
}

/// The response for `variant` of `entry`: preconditions, then the whole file, a range,
/// several ranges or 416. Every header value was rendered when the entry was made.
fn file_response(
    config: &Config,
    method: &Method,
    headers: &HeaderMap,
    entry: &Entry,
    variant: &Variant,
    coding: Option<Coding>,
) -> Response<Body> {
    let etag = variant.etag.to_str().unwrap_or_default();
    let modified = variant.modified;

    // Room for the layers in front (request id) without growing the map.
    let mut h = HeaderMap::with_capacity(12);
    h.insert(header::ETAG, variant.etag.clone());
    if let Some(v) = &variant.last_modified {
        h.insert(header::LAST_MODIFIED, v.clone());
    }
    if let Some(v) = &entry.cache_control {
        h.insert(header::CACHE_CONTROL, v.clone());
    }
    if !config.precompressed.is_empty() {
        h.insert(header::VARY, HeaderValue::from_static("accept-encoding"));
    }

    match conditional::evaluate(method, headers, etag, modified) {
        Precondition::Proceed => {}
        Precondition::NotModified => {
            return assemble(StatusCode::NOT_MODIFIED, h, Body::empty());
        }
        Precondition::Failed => {
            let mut failed = status(StatusCode::PRECONDITION_FAILED);
            failed.headers_mut().extend(h);
            return failed;
        }
    }

    h.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    if let Some(coding) = coding {
        h.insert(header::CONTENT_ENCODING, coding.content_encoding());
    }
    let len = variant.len;
    let ranges = range::for_request(method, headers, len, etag, modified, config.max_ranges);
    let head = method == Method::HEAD;
    let (code, body) = match ranges {
        Ranges::Full => {
            h.insert(header::CONTENT_TYPE, entry.content_type.clone());
            h.insert(header::CONTENT_LENGTH, variant.content_length.clone());
            let body = if head {
                Body::empty()
            } else {
                variant.body(0, len)
            };
            (StatusCode::OK, body)
        }
        Ranges::Satisfiable(ranges) if ranges.len() == 1 => {
            let r = ranges[0];
            h.insert(header::CONTENT_TYPE, entry.content_type.clone());
            h.insert(header::CONTENT_RANGE, range::content_range(r, len));
            h.insert(header::CONTENT_LENGTH, HeaderValue::from(r.len()));
            (StatusCode::PARTIAL_CONTENT, variant.body(r.start, r.len()))
        }
        Ranges::Satisfiable(ranges) => {
            let multipart =
                range::multipart(&ranges, len, Some(&entry.content_type), Boundary::random());
            h.insert(header::CONTENT_TYPE, multipart.content_type.clone());
            h.insert(
                header::CONTENT_LENGTH,
                HeaderValue::from(multipart.content_length),
            );
            let mut parts = Vec::with_capacity(multipart.parts.len() * 2 + 1);
            for part in multipart.parts {
                parts.push(Body::from(part.head));
                parts.push(variant.body(part.range.start, part.range.len()));
            }
            parts.push(Body::from(multipart.closing));
            (StatusCode::PARTIAL_CONTENT, Body::new(Chain::new(parts)))
        }
        Ranges::Unsatisfiable => {
            h.insert(header::CONTENT_RANGE, range::unsatisfied_content_range(len));
            h.insert(header::CONTENT_LENGTH, HeaderValue::from(0u64));
            (StatusCode::RANGE_NOT_SATISFIABLE, Body::empty())
        }
    };
    assemble(code, h, body)
}

fn assemble(code: StatusCode, headers: HeaderMap, body: Body) -> Response<Body> {
    let mut res = Response::new(body);
    *res.status_mut() = code;
    *res.headers_mut() = headers;
    res
}

/// `Location: NAME/` relative to the request, query kept: a relative reference resolves
/// against the URL the client actually used, so the redirect is right however the
/// service is mounted (`nest_service("/assets", ...)` strips the prefix from the URI the
/// service sees, not from the client's).
fn redirect_to_directory(uri: &Uri) -> Response<Body> {
    let last = uri.path().rsplit('/').next().unwrap_or_default();
    let mut location = format!("{last}/");
    if let Some(query) = uri.query() {
        location.push('?');
        location.push_str(query);
    }
    let mut res = status(StatusCode::PERMANENT_REDIRECT);
    if let Ok(v) = HeaderValue::from_str(&location) {
        res.headers_mut().insert(header::LOCATION, v);
    }
    res
}

/// Marks a response that found no file to serve (404, or 405 for a method files do not
/// answer), so that [`ServeStaticLayer`](super::ServeStaticLayer) hands the request to
/// its inner service instead.
#[derive(Clone, Copy, Debug)]
pub(crate) struct NoFile;

fn no_file(code: StatusCode) -> Response<Body> {
    let mut res = status(code);
    res.extensions_mut().insert(NoFile);
    res
}

/// 503 with `Retry-After: 1`: the server is out of descriptors (or memory) for now.
fn unavailable() -> Response<Body> {
    let mut res = status(StatusCode::SERVICE_UNAVAILABLE);
    res.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    res
}

/// A bodiless answer with a short plain-text reason, as scb's other services give.
pub(crate) fn status(code: StatusCode) -> Response<Body> {
    scb_core::respond::reason(code)
}
