//! On-the-fly compression for responses that have no precompressed sidecar, and for any
//! other service's responses (a proxy's, a fixed response's).
//!
//! ```
//! use scb_static::ServeStatic;
//! use scb_static::compress::CompressLayer;
//! use tower::ServiceBuilder;
//!
//! # fn main() -> Result<(), scb_static::BuildError> {
//! let files = ServiceBuilder::new()
//!     .layer(CompressLayer::new())
//!     .service(ServeStatic::builder(".").precompressed(["br", "gzip"]).build()?);
//! # let _ = files;
//! # Ok(())
//! # }
//! ```
//!
//! The encoding itself is tower-http's [`Compression`] (gzip, brotli, zstd, chosen by the
//! request's `Accept-Encoding` with q-values). This layer only decides *which* responses go
//! through it, and leaves every other response exactly as the inner service made it.
//! That is why it is not tower-http's layer used directly: `Compression` wraps every body
//! in its `CompressionBody`, including the ones it passes through uncompressed, and a
//! wrapped body can no longer be recognised as scb's [`Body`] carrying a file region, so
//! images and other large files would lose the zero-copy path on a route where compression
//! is on. Here a response that will not be compressed is never wrapped.
//!
//! A response is compressed when all of these hold:
//!
//! - the request has an `Accept-Encoding` header that names gzip, br or zstd;
//! - the status is 200 (never 206: a range of a compressed stream is not a range of the
//!   file; nor 304, HEAD-less errors or redirects);
//! - it has no `Content-Encoding` already (a sidecar was served, or an upstream behind a
//!   proxy encoded it) and no `Content-Range`;
//! - it has no `Cache-Control: no-transform`;
//! - its `Content-Type` is a compressible type: `text/*`, JavaScript, JSON, XML, the
//!   `+json`/`+xml` types (SVG among them), WebAssembly and the uncompressed font formats;
//!   [`types`](CompressLayer::types) replaces that list;
//! - it is at least [`min_size`](CompressLayer::min_size) bytes long (256 by default,
//!   [`DEFAULT_MIN_SIZE`] says why).
//!
//! A compressed response loses `Content-Length` and `Accept-Ranges` (tower-http) and its
//! `ETag` becomes weak (`W/"..."`): a strong validator names one exact sequence of bytes,
//! and the compressor's output is not the file's. Every response whose type is
//! compressible, compressed or not, carries `Vary: Accept-Encoding`, so a shared cache
//! never hands the gzip bytes to a client that did not ask for them.

use std::convert::Infallible;
use std::future::{Future, Ready, ready};
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{HeaderMap, Request, Response, StatusCode};
use pin_project_lite::pin_project;
use scb_core::{Body, BoxError};
use tower::{Layer, Service};
/// tower-http's level, which [`CompressLayer::level`] takes.
pub use tower_http::compression::CompressionLevel;
use tower_http::compression::{Compression, Predicate};

/// Responses smaller than this are sent as they are by default. A compressed response
/// pays about 20 bytes of gzip header and trailer (brotli and zstd a few less) and loses
/// its length, so HTTP/1.1 frames it in chunks (about 10 bytes more); text shrinks by a
/// half to two thirds, so below roughly 100 bytes it can come out longer, and at 256
/// bytes it saves well over a hundred. A small HTML page (an SPA's 386-byte
/// `index.html`) is compressed, as nginx would. nginx's `gzip_min_length` default is
/// 20 bytes, Caddy's `encode` 512, Cloudflare's threshold 256 bytes.
pub const DEFAULT_MIN_SIZE: u64 = 256;

/// Adds on-the-fly compression to a service answering with [`Body`] responses; see the
/// [module docs](self).
#[derive(Clone, Debug)]
pub struct CompressLayer {
    min_size: u64,
    level: CompressionLevel,
    /// `None`: the built-in list of compressible types (see [`compressible`]).
    types: Option<CompressTypes>,
}

/// The media types a [`CompressLayer`] compresses, in place of its built-in list: each
/// entry a type (`application/json`) or all of a top-level type (`text/*`), compared
/// without case and parameters.
///
/// ```
/// use scb_static::compress::CompressTypes;
///
/// let types = CompressTypes::new(["text/*", "application/json"]).unwrap();
/// assert!(CompressTypes::new(["json"]).is_err());
/// # let _ = types;
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompressTypes(std::sync::Arc<[MediaRange]>);

/// A type and its subtype, lower-cased; `None` for `type/*`.
type MediaRange = (Box<str>, Option<Box<str>>);

/// An entry given to [`CompressTypes::new`] that is not `type/subtype` or `type/*`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{entry:?} is not a media type (`type/subtype` or `type/*`)")]
#[non_exhaustive]
pub struct InvalidMediaType {
    /// Its position in the list, from 0.
    pub index: usize,
    /// The entry as given.
    pub entry: String,
}

impl CompressTypes {
    /// The types given.
    ///
    /// # Errors
    ///
    /// The first entry that is not `type/subtype` or `type/*`, and its position.
    pub fn new<I, T>(types: I) -> Result<Self, InvalidMediaType>
    where
        I: IntoIterator<Item = T>,
        T: AsRef<str>,
    {
        let token = |s: &str| {
            !s.is_empty()
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"!#$&-^_.+".contains(&b))
        };
        types
            .into_iter()
            .enumerate()
            .map(|(index, entry)| {
                let entry = entry.as_ref();
                let bad = || InvalidMediaType {
                    index,
                    entry: entry.to_owned(),
                };
                let (top, sub) = entry.trim().split_once('/').ok_or_else(bad)?;
                if !token(top) || !(sub == "*" || token(sub)) {
                    return Err(bad());
                }
                let sub = (sub != "*").then(|| sub.to_ascii_lowercase().into_boxed_str());
                Ok((top.to_ascii_lowercase().into_boxed_str(), sub))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(|types| Self(types.into()))
    }

    fn contains(&self, content_type: &[u8]) -> bool {
        let Some((top, sub)) = essence(content_type) else {
            return false;
        };
        self.0.iter().any(|(t, s)| {
            top.eq_ignore_ascii_case(t.as_bytes())
                && s.as_ref()
                    .is_none_or(|s| sub.eq_ignore_ascii_case(s.as_bytes()))
        })
    }
}

impl Default for CompressLayer {
    fn default() -> Self {
        Self::new()
    }
}

impl CompressLayer {
    /// Compression with the defaults below.
    #[must_use]
    pub fn new() -> Self {
        Self {
            min_size: DEFAULT_MIN_SIZE,
            level: CompressionLevel::Default,
            types: None,
        }
    }

    /// Smallest response, by `Content-Length`, that is compressed. Defaults to 256 bytes
    /// ([`DEFAULT_MIN_SIZE`], which says why).
    #[must_use]
    pub fn min_size(mut self, bytes: u64) -> Self {
        self.min_size = bytes;
        self
    }

    /// The media types compressed. Defaults to the built-in list of the
    /// [module docs](self): text, JavaScript, JSON, XML, SVG, WebAssembly and the
    /// uncompressed font formats.
    #[must_use]
    pub fn types(mut self, types: CompressTypes) -> Self {
        self.types = Some(types);
        self
    }

    /// Compression level, passed to tower-http. Defaults to
    /// [`CompressionLevel::Default`]: each algorithm's default for on-the-fly work (gzip 6
    /// of 9, brotli 4 of 11, zstd 3 of 22), a fraction of the CPU of the best levels for
    /// most of their saving; the best levels belong to precompressed sidecars, made once.
    #[must_use]
    pub fn level(mut self, level: CompressionLevel) -> Self {
        self.level = level;
        self
    }
}

impl<S> Layer<S> for CompressLayer {
    type Service = Compress<S>;

    fn layer(&self, inner: S) -> Compress<S> {
        Compress {
            inner,
            layer: self.clone(),
        }
    }
}

/// The service made by [`CompressLayer`].
#[derive(Clone, Debug)]
pub struct Compress<S> {
    inner: S,
    layer: CompressLayer,
}

/// Any inner service: response bodies come out as [`Body`] (free when they already are
/// one), errors as they are.
impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for Compress<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    ResBody: http_body::Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        let accept = accepts_compression(req.headers()).then(|| {
            req.headers()
                .get_all(header::ACCEPT_ENCODING)
                .iter()
                .cloned()
                .collect()
        });
        let revalidates_weak = req
            .headers()
            .get_all(header::IF_NONE_MATCH)
            .iter()
            .any(|value| value.as_bytes().windows(2).any(|w| w == b"W/"));
        ResponseFuture {
            state: State::Inner {
                future: self.inner.call(req),
                accept,
                revalidates_weak,
            },
            layer: self.layer.clone(),
        }
    }
}

pin_project! {
    /// Response future of [`Compress`].
    #[derive(Debug)]
    pub struct ResponseFuture<F> {
        #[pin]
        state: State<F>,
        layer: CompressLayer,
    }
}

pin_project! {
    #[project = StateProj]
    #[derive(Debug)]
    enum State<F> {
        Inner {
            #[pin]
            future: F,
            // The request's `Accept-Encoding` values, when one names an encoding we have.
            accept: Option<Vec<HeaderValue>>,
            // Whether `If-None-Match` holds a weak tag, as a compressed response's is.
            revalidates_weak: bool,
        },
        Compressing {
            #[pin]
            future: tower_http::compression::ResponseFuture<Ready<Result<Response<Body>, Infallible>>, Eligible>,
        },
    }
}

impl<F, ResBody, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response<ResBody>, E>>,
    ResBody: http_body::Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    type Output = Result<Response<Body>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::Inner {
                    future,
                    accept,
                    revalidates_weak,
                } => {
                    let mut res = ready!(future.poll(cx))?.map(Body::new);
                    if res.status() == StatusCode::NOT_MODIFIED && *revalidates_weak {
                        // The client holds the compressed variant, whose tag is weak (a
                        // 304 has no Content-Type to decide by): keep its tag weak too.
                        weaken_etag(res.headers_mut());
                    }
                    let compressible =
                        res.headers()
                            .get(header::CONTENT_TYPE)
                            .is_some_and(|value| match &this.layer.types {
                                None => compressible(value.as_bytes()),
                                Some(types) => types.contains(value.as_bytes()),
                            });
                    if !compressible {
                        return Poll::Ready(Ok(res));
                    }
                    add_vary(res.headers_mut());
                    let Some(accept) = accept.take() else {
                        return Poll::Ready(Ok(res));
                    };
                    let eligible = Eligible {
                        min_size: this.layer.min_size,
                    };
                    if !eligible.should_compress(&res) {
                        return Poll::Ready(Ok(res));
                    }
                    let future = compression(res, accept, eligible, this.layer.level);
                    this.state.set(State::Compressing { future });
                }
                StateProj::Compressing { future } => {
                    let Ok(res) = ready!(future.poll(cx));
                    let (mut parts, body) = res.into_parts();
                    if parts.headers.contains_key(header::CONTENT_ENCODING) {
                        weaken_etag(&mut parts.headers);
                    }
                    return Poll::Ready(Ok(Response::from_parts(parts, Body::new(body))));
                }
            }
        }
    }
}

/// Hands `res` to tower-http's [`Compression`], which picks the encoding from `accept`
/// and wraps the body. `Compression` takes its response from a service: it gets one that
/// already has it.
fn compression(
    res: Response<Body>,
    accept: Vec<HeaderValue>,
    eligible: Eligible,
    level: CompressionLevel,
) -> tower_http::compression::ResponseFuture<Ready<Result<Response<Body>, Infallible>>, Eligible> {
    let mut req = Request::new(());
    for value in accept {
        req.headers_mut().append(header::ACCEPT_ENCODING, value);
    }
    Compression::new(Answer(Some(res)))
        .quality(level)
        .compress_when(eligible)
        .call(req)
}

/// A service whose one response is already made.
struct Answer(Option<Response<Body>>);

impl Service<Request<()>> for Answer {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Ready<Result<Response<Body>, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _req: Request<()>) -> Self::Future {
        ready(Ok(self.0.take().unwrap_or_default()))
    }
}

/// The status, header and size conditions of the [module docs](self); the type is
/// checked before.
#[derive(Clone, Copy, Debug)]
struct Eligible {
    min_size: u64,
}

impl Predicate for Eligible {
    fn should_compress<B: http_body::Body>(&self, res: &Response<B>) -> bool {
        let headers = res.headers();
        res.status() == StatusCode::OK
            && !headers.contains_key(header::CONTENT_ENCODING)
            && !headers.contains_key(header::CONTENT_RANGE)
            && !forbids_transform(headers)
            && content_length(res).is_none_or(|len| len >= self.min_size)
    }
}

/// `Cache-Control: no-transform`: RFC 9110 (7.7) forbids an intermediary to change the
/// content, its encoding included; an upstream behind the proxy may say so.
fn forbids_transform(headers: &HeaderMap) -> bool {
    headers.get_all(header::CACHE_CONTROL).iter().any(|value| {
        value
            .as_bytes()
            .split(|&b| b == b',')
            .any(|directive| directive.trim_ascii().eq_ignore_ascii_case(b"no-transform"))
    })
}

fn content_length<B: http_body::Body>(res: &Response<B>) -> Option<u64> {
    res.headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .or_else(|| res.body().size_hint().exact())
}

/// Whether some `Accept-Encoding` value names an encoding tower-http can produce. A
/// client that names none gets the response untouched, without a detour through
/// tower-http (which would answer `identity;q=0` alone with 406).
fn accepts_compression(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .any(|value| {
            value.as_bytes().split(|&b| b == b',').any(|item| {
                let mut parts = item.split(|&b| b == b';');
                let coding = parts.next().unwrap_or_default().trim_ascii();
                let refused = parts.any(|param| {
                    let param = param.trim_ascii();
                    param.len() >= 2
                        && param[..2].eq_ignore_ascii_case(b"q=")
                        && param[2..]
                            .trim_ascii()
                            .iter()
                            .all(|&b| b == b'0' || b == b'.')
                });
                !refused
                    && [&b"gzip"[..], b"br", b"zstd", b"*"]
                        .iter()
                        .any(|name| coding.eq_ignore_ascii_case(name))
            })
        })
}

/// Whether a `Content-Type` is worth compressing: text and the structured text formats.
/// Images other than SVG, audio, video, archives and WOFF fonts are compressed already.
fn compressible(content_type: &[u8]) -> bool {
    let Some((top, sub)) = essence(content_type) else {
        return false;
    };
    let is = |a: &[u8], b: &str| a.eq_ignore_ascii_case(b.as_bytes());
    let ends = |a: &[u8], b: &str| {
        a.len() >= b.len() && a[a.len() - b.len()..].eq_ignore_ascii_case(b.as_bytes())
    };
    if is(top, "text") {
        !is(sub, "event-stream")
    } else if is(top, "application") {
        ["javascript", "json", "xml", "wasm", "x-javascript"]
            .iter()
            .any(|name| is(sub, name))
            || ends(sub, "+json")
            || ends(sub, "+xml")
    } else if is(top, "image") {
        ["svg+xml", "x-icon", "vnd.microsoft.icon"]
            .iter()
            .any(|name| is(sub, name))
    } else if is(top, "font") {
        is(sub, "ttf") || is(sub, "otf")
    } else {
        false
    }
}

/// The type and subtype of a `Content-Type`, without its parameters.
fn essence(content_type: &[u8]) -> Option<(&[u8], &[u8])> {
    let essence = content_type
        .split(|&b| b == b';')
        .next()
        .unwrap_or_default()
        .trim_ascii();
    let slash = essence.iter().position(|&b| b == b'/')?;
    Some((&essence[..slash], &essence[slash + 1..]))
}

fn add_vary(headers: &mut HeaderMap) {
    let present = headers.get_all(header::VARY).iter().any(|value| {
        value.as_bytes().split(|&b| b == b',').any(|name| {
            let name = name.trim_ascii();
            name == b"*" || name.eq_ignore_ascii_case(b"accept-encoding")
        })
    });
    if !present {
        headers.append(header::VARY, HeaderValue::from_static("accept-encoding"));
    }
}

/// `"abc"` becomes `W/"abc"`; a weak tag stays as it is.
fn weaken_etag(headers: &mut HeaderMap) {
    let Some(etag) = headers.get(header::ETAG) else {
        return;
    };
    if etag.as_bytes().starts_with(b"W/") {
        return;
    }
    let mut weak = Vec::with_capacity(etag.len() + 2);
    weak.extend_from_slice(b"W/");
    weak.extend_from_slice(etag.as_bytes());
    match HeaderValue::from_bytes(&weak) {
        Ok(weak) => {
            headers.insert(header::ETAG, weak);
        }
        Err(_) => {
            headers.remove(header::ETAG);
        }
    }
}

#[cfg(test)]
mod tests;
