//! From a request to a response, synchronously: the whole decision of a static-file
//! request in one function, run inline on the worker with [`Mode::Cached`] and, when the
//! kernel says a lookup or read would block, once more on the blocking pool with
//! [`Mode::Blocking`].

use std::fs::File;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, Response, StatusCode, Uri};
use scb_core::{Body, FileRegion, FileStamp};

use super::chain::Chain;
use super::{Config, listing};
use crate::conditional::{self, Precondition};
use crate::encoding::{self, Candidates, Coding};
use crate::path::{self, PathError};
use crate::range::{self, Boundary, Ranges};
use crate::sys::{Kind, Meta, Mode, OpenError, Opened, read_at_nowait};

/// Files up to this size are read whole while the request is being decided, in one
/// `preadv2(RWF_NOWAIT)`: the response is then plain bytes, the file is closed at once,
/// and the body needs no further I/O. 128 KiB covers the HTML, CSS, JS and icons that make
/// up most requests of a site (the prototype measured the same threshold); larger files go
/// out as a file region (`sendfile` on plain TCP).
pub(crate) const INLINE_READ_MAX: u64 = 128 * 1024;

/// The inline attempt needs the blocking pool: a lookup or a read would wait for the disk.
#[derive(Debug)]
pub(crate) struct WouldBlock;

/// Answers one request. `Err(WouldBlock)` only in [`Mode::Cached`]. `not_found_page`:
/// whether a 404 may send the configured page (the layer form throws 404s away).
pub(crate) fn respond(
    config: &Config,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    not_found_page: bool,
    mode: Mode,
) -> Result<Response<Body>, WouldBlock> {
    if method != Method::GET && method != Method::HEAD {
        let mut res = no_file(StatusCode::METHOD_NOT_ALLOWED);
        res.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return Ok(res);
    }
    let page = config.not_found.as_deref().filter(|_| not_found_page);
    let path = match path::normalize(uri.path()) {
        Ok(p) => p,
        Err(PathError::Malformed) => return Ok(status(StatusCode::BAD_REQUEST)),
        Err(PathError::Escapes) => return not_found(config, page, method, mode),
    };
    if path.hidden && !config.show_hidden {
        return not_found(config, page, method, mode);
    }
    let candidates = if config.precompressed.is_empty() {
        Candidates::IDENTITY_ONLY
    } else {
        encoding::negotiate_all(
            headers.get_all(header::ACCEPT_ENCODING),
            &config.precompressed,
        )
    };

    let mut rel = path.rel;
    let mut found = match open_variant(config, &rel, &candidates, mode)? {
        Variant::Forbidden => return Ok(status(StatusCode::FORBIDDEN)),
        variant => variant.found(),
    };
    // The directory asked for, when its index is not there.
    let mut dir = None;
    if let Some((_, opened)) = found.take_if(|(_, opened)| opened.meta.kind == Kind::Dir) {
        if !path.trailing_slash {
            return Ok(redirect_to_directory(uri));
        }
        if let Some(index) = &config.index {
            let index = if rel.is_empty() {
                index.clone()
            } else {
                format!("{rel}/{index}")
            };
            found = match open_variant(config, &index, &candidates, mode)? {
                Variant::Forbidden => return Ok(status(StatusCode::FORBIDDEN)),
                variant => variant.found(),
            };
            if found.is_some() {
                rel = index;
            }
        }
        dir = Some(opened);
    }
    let Some((coding, opened)) = found else {
        let identity = candidates.identity_acceptable();
        return match (dir, &config.fallback) {
            (Some(dir), _) if identity && config.list_directories => {
                listing::respond(config, method, &rel, &dir.file, mode)
            }
            (None, Some(fallback)) if names_nothing(config, &rel, mode)? => {
                serve_fallback(config, fallback, page, method, headers, &candidates, mode)
            }
            _ if identity => not_found(config, page, method, mode),
            _ => Ok(status(StatusCode::NOT_ACCEPTABLE)),
        };
    };
    if opened.meta.kind != Kind::File {
        return not_found(config, page, method, mode);
    }
    file_response(config, method, headers, &rel, coding, opened, mode)
}

/// Whether `rel` names nothing at all: neither the file nor a sidecar of it in any
/// configured coding (a client that cannot take `app.js.br` must get 404 or 406, not the
/// app's HTML as `app.js`), nor anything the server may not read. Only then does the
/// fallback answer. Costs a few lookups, only for misses on a route with a fallback.
fn names_nothing(config: &Config, rel: &str, mode: Mode) -> Result<bool, WouldBlock> {
    let sidecars = config
        .precompressed
        .iter()
        .map(|coding| format!("{rel}{}", coding.suffix()));
    for name in std::iter::once(rel.to_owned()).chain(sidecars) {
        match config.root.lookup(&name, mode) {
            Err(OpenError::NotFound) => {}
            Err(OpenError::WouldBlock) => return Err(WouldBlock),
            Ok(_) | Err(OpenError::Refused | OpenError::Forbidden | OpenError::Io(_)) => {
                return Ok(false);
            }
        }
    }
    Ok(true)
}

/// The SPA fallback `file`, served as itself (validators, sidecars, conditionals,
/// ranges) with the status any file gets, and without [`NoFile`]: the app owns the path.
fn serve_fallback(
    config: &Config,
    file: &str,
    page: Option<&str>,
    method: &Method,
    headers: &HeaderMap,
    candidates: &Candidates,
    mode: Mode,
) -> Result<Response<Body>, WouldBlock> {
    match open_variant(config, file, candidates, mode)? {
        Variant::File(coding, opened) if opened.meta.kind == Kind::File => {
            file_response(config, method, headers, file, coding, opened, mode)
        }
        Variant::Missing if !candidates.identity_acceptable() => {
            Ok(status(StatusCode::NOT_ACCEPTABLE))
        }
        _ => not_found(config, page, method, mode),
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
    mode: Mode,
) -> Result<Response<Body>, WouldBlock> {
    let Some(page) = page else {
        return Ok(no_file(StatusCode::NOT_FOUND));
    };
    let Opened { file, meta } = match lookup(config, page, mode)? {
        Some(opened) if opened.meta.kind == Kind::File => opened,
        _ => return Ok(no_file(StatusCode::NOT_FOUND)),
    };
    let mut h = HeaderMap::with_capacity(8);
    h.insert(header::CONTENT_TYPE, crate::mime::content_type(page));
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(meta.len));
    let body = if method == Method::HEAD {
        Body::empty()
    } else {
        body_of(file, 0, meta.len, meta.stamp(), mode)?
    };
    let mut res = assemble(StatusCode::NOT_FOUND, h, body);
    res.extensions_mut().insert(NoFile);
    Ok(res)
}

/// Opens the best acceptable variant of `rel`: a sidecar in the negotiated order, else the
/// file itself when identity is acceptable. The handle returned is the one everything
/// after is computed from (no stat-then-open window).
fn open_variant(
    config: &Config,
    rel: &str,
    candidates: &Candidates,
    mode: Mode,
) -> Result<Variant, WouldBlock> {
    for &coding in candidates.codings() {
        if rel.is_empty() {
            break;
        }
        // A sidecar that cannot be opened, for whatever reason, is one not to use.
        let sidecar = format!("{rel}{}", coding.suffix());
        match config.root.lookup(&sidecar, mode) {
            Ok(opened) if opened.meta.kind == Kind::File => {
                return Ok(Variant::File(Some(coding), opened));
            }
            Err(OpenError::WouldBlock) => return Err(WouldBlock),
            Ok(_) | Err(_) => {}
        }
    }
    // The file itself: needed even when identity is not acceptable, to tell a directory
    // (redirect, index) from a missing file.
    match config.root.lookup(rel, mode) {
        Ok(opened) if opened.meta.kind == Kind::Dir || candidates.identity_acceptable() => {
            Ok(Variant::File(None, opened))
        }
        Ok(_) | Err(OpenError::NotFound | OpenError::Refused) => Ok(Variant::Missing),
        Err(OpenError::Forbidden) => Ok(Variant::Forbidden),
        Err(OpenError::WouldBlock) => Err(WouldBlock),
        Err(OpenError::Io(e)) => {
            tracing::warn!(path = rel, error = %e, "static file lookup failed");
            Ok(Variant::Missing)
        }
    }
}

/// What [`open_variant`] found.
enum Variant {
    /// The variant to serve (or a directory), and its coding when it is a sidecar.
    File(Option<Coding>, Opened),
    /// Nothing there, or nothing the policy lets the client see: 404.
    Missing,
    /// There, but the server may not read it (`EACCES`/`EPERM`): 403, as nginx answers.
    /// An escape beneath the root is [`Missing`](Self::Missing), not this: the client
    /// learns nothing about what lies outside.
    Forbidden,
}

impl Variant {
    /// The file or directory found; `None` otherwise (the caller answers
    /// [`Forbidden`](Self::Forbidden) first).
    fn found(self) -> Option<(Option<Coding>, Opened)> {
        match self {
            Self::File(coding, opened) => Some((coding, opened)),
            Self::Missing | Self::Forbidden => None,
        }
    }
}

fn lookup(config: &Config, rel: &str, mode: Mode) -> Result<Option<Opened>, WouldBlock> {
    match config.root.lookup(rel, mode) {
        Ok(opened) => Ok(Some(opened)),
        Err(OpenError::WouldBlock) => Err(WouldBlock),
        Err(OpenError::NotFound | OpenError::Refused | OpenError::Forbidden) => Ok(None),
        Err(OpenError::Io(e)) => {
            tracing::warn!(path = rel, error = %e, "static file lookup failed");
            Ok(None)
        }
    }
}

#[allow(
    clippy::too_many_arguments,
    reason = "one call site; a struct would only rename them"
)]
fn file_response(
    config: &Config,
    method: &Method,
    headers: &HeaderMap,
    rel: &str,
    coding: Option<Coding>,
    opened: Opened,
    mode: Mode,
) -> Result<Response<Body>, WouldBlock> {
    let Opened { file, meta } = opened;
    let etag =
        conditional::strong_etag(meta.len, meta.modified_secs, meta.modified_nanos, meta.ino);
    let modified = mtime(&meta);

    // Room for the layers in front (request id) without growing the map.
    let mut h = HeaderMap::with_capacity(12);
    if let Ok(v) = HeaderValue::from_str(&etag) {
        h.insert(header::ETAG, v);
    }
    if let Some(v) = conditional::last_modified_header(modified, SystemTime::now()) {
        h.insert(header::LAST_MODIFIED, v);
    }
    if !config.cache_control.is_empty()
        && let Some(v) = config.cache_control.for_path(rel)
    {
        h.insert(header::CACHE_CONTROL, v.clone());
    }
    if !config.precompressed.is_empty() {
        h.insert(header::VARY, HeaderValue::from_static("accept-encoding"));
    }

    match conditional::evaluate(method, headers, &etag, modified) {
        Precondition::Proceed => {}
        Precondition::NotModified => {
            return Ok(assemble(StatusCode::NOT_MODIFIED, h, Body::empty()));
        }
        Precondition::Failed => {
            let mut failed = status(StatusCode::PRECONDITION_FAILED);
            failed.headers_mut().extend(h);
            return Ok(failed);
        }
    }

    let content_type = crate::mime::content_type(rel);
    h.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    if let Some(coding) = coding {
        h.insert(header::CONTENT_ENCODING, coding.content_encoding());
    }
    let len = meta.len;
    let ranges = range::for_request(method, headers, len, &etag, modified, config.max_ranges);
    let head = method == Method::HEAD;
    let (code, body) = match ranges {
        Ranges::Full => {
            h.insert(header::CONTENT_TYPE, content_type);
            h.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
            let body = if head {
                Body::empty()
            } else {
                body_of(file, 0, len, meta.stamp(), mode)?
            };
            (StatusCode::OK, body)
        }
        Ranges::Satisfiable(ranges) if ranges.len() == 1 => {
            let r = ranges[0];
            h.insert(header::CONTENT_TYPE, content_type);
            h.insert(header::CONTENT_RANGE, range::content_range(r, len));
            h.insert(header::CONTENT_LENGTH, HeaderValue::from(r.len()));
            (
                StatusCode::PARTIAL_CONTENT,
                body_of(file, r.start, r.len(), meta.stamp(), mode)?,
            )
        }
        Ranges::Satisfiable(ranges) => {
            let multipart = range::multipart(&ranges, len, Some(&content_type), Boundary::random());
            h.insert(header::CONTENT_TYPE, multipart.content_type.clone());
            h.insert(
                header::CONTENT_LENGTH,
                HeaderValue::from(multipart.content_length),
            );
            let file = Arc::new(file);
            let mut parts = Vec::with_capacity(multipart.parts.len() * 2 + 1);
            for part in multipart.parts {
                parts.push(Body::from(part.head));
                parts.push(Body::file(
                    FileRegion::new(Arc::clone(&file), part.range.start, part.range.len())
                        .with_stamp(meta.stamp()),
                ));
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
    Ok(assemble(code, h, body))
}

fn assemble(code: StatusCode, headers: HeaderMap, body: Body) -> Response<Body> {
    let mut res = Response::new(body);
    *res.status_mut() = code;
    *res.headers_mut() = headers;
    res
}

/// The `len` bytes at `start`: read now when small (from the page cache only, in
/// [`Mode::Cached`]), else a file region the server sends with `sendfile` or reads in
/// chunks.
///
/// Either way the bytes are checked against `stamp`, the state the headers were computed
/// from: a file rewritten in place while being read is never sent as a mix of versions
/// (a small one is read again, from scratch, off the worker; a large one ends with an
/// error before its last byte, and the server closes the connection).
fn body_of(
    file: File,
    start: u64,
    len: u64,
    stamp: FileStamp,
    mode: Mode,
) -> Result<Body, WouldBlock> {
    if len == 0 {
        return Ok(Body::empty());
    }
    if len > INLINE_READ_MAX {
        return Ok(Body::file(
            FileRegion::new(Arc::new(file), start, len).with_stamp(stamp),
        ));
    }
    let mut buf = vec![0u8; len as usize];
    let mut filled = 0;
    while filled < buf.len() {
        let offset = start + filled as u64;
        let n = match mode {
            Mode::Cached => match read_at_nowait(&file, offset, &mut buf[filled..]) {
                Ok(Some(n)) => n,
                // Not cached, or a spurious 0 before the known end: finish off the worker.
                Ok(None) => return Err(WouldBlock),
                Err(e) => return Ok(read_failed(&e)),
            },
            Mode::Blocking => {
                use std::os::unix::fs::FileExt as _;
                match file.read_at(&mut buf[filled..], offset) {
                    Ok(n) => n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => return Ok(read_failed(&e)),
                }
            }
        };
        if n == 0 {
            if mode == Mode::Cached {
                return Err(WouldBlock);
            }
            // The file shrank after it was opened: send what the headers promise or
            // nothing; a body that ends early makes the server close the connection.
            return Ok(Body::file(FileRegion::new(Arc::new(file), start, len)));
        }
        filled += n;
    }
    match FileStamp::of(&file) {
        Ok(now) if now == stamp => Ok(Body::from(Bytes::from(buf))),
        // Changed since it was opened: decide the whole request again, once, off the
        // worker, where the new version's headers and bytes are read together.
        Ok(_) if mode == Mode::Cached => Err(WouldBlock),
        Ok(_) => Ok(read_failed(&std::io::Error::other(
            scb_core::body::FileChanged,
        ))),
        Err(e) => Ok(read_failed(&e)),
    }
}

fn read_failed(e: &std::io::Error) -> Body {
    tracing::warn!(error = %e, "reading a static file failed");
    // An error body: the server closes the connection rather than completing the
    // response with the wrong length.
    Body::new(http_body_util::StreamBody::new(futures_util::stream::once(
        std::future::ready(Err::<http_body::Frame<Bytes>, std::io::Error>(
            std::io::Error::other("static file read failed"),
        )),
    )))
}

fn mtime(meta: &Meta) -> SystemTime {
    let secs = meta.modified_secs;
    let nanos = Duration::from_nanos(u64::from(meta.modified_nanos));
    if secs >= 0 {
        UNIX_EPOCH + Duration::from_secs(secs.unsigned_abs()) + nanos
    } else {
        UNIX_EPOCH - Duration::from_secs(secs.unsigned_abs()) + nanos
    }
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

/// A bodiless answer with a short plain-text reason, as scb's other services give.
pub(crate) fn status(code: StatusCode) -> Response<Body> {
    scb_core::respond::reason(code)
}
