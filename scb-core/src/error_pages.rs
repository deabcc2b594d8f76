//! Error pages: a site's own page in place of the body of a response with a given status.
//!
//! [`ErrorPagesLayer`] replaces the body of every response whose status has a page,
//! whatever answered: a static route's 404 or 403, a proxy's 502 or 504 (an upstream's
//! own 502 too), a limit's 503. The status and the other fields stay; the page goes out as
//! `text/html; charset=utf-8` with its length, `{request_id}` replaced by the request's
//! id and `{trace_id}` by its trace's (see [`spans`](crate::spans)). Responses the server makes before the stack (400, 408, 413, 431 for a malformed
//! request) keep their plain text.
//!
//! ```
//! use bytes::Bytes;
//! use http::{Request, StatusCode};
//! use scb_core::error_pages::ErrorPagesLayer;
//! use scb_core::respond::Respond;
//! use scb_core::Body;
//! use tower::{Layer, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let pages = ErrorPagesLayer::new().page(StatusCode::NOT_FOUND, Bytes::from("<h1>Gone</h1>"));
//! let svc = pages.layer(Respond::new(StatusCode::NOT_FOUND));
//! let res = svc.oneshot(Request::new(Body::empty())).await.unwrap();
//! assert_eq!(res.status(), StatusCode::NOT_FOUND);
//! assert_eq!(res.headers()["content-type"], "text/html; charset=utf-8");
//! # }
//! ```

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode, header};
use pin_project_lite::pin_project;
use tower::{Layer, Service};

use crate::Body;
use crate::request_id::Id;
use crate::trace_context::TraceContext;

/// The placeholders a page may hold.
const REQUEST_ID: &[u8] = b"{request_id}";
const TRACE_ID: &[u8] = b"{trace_id}";

/// Applies [`ErrorPages`] to a service.
#[derive(Clone, Debug, Default)]
pub struct ErrorPagesLayer {
    pages: Arc<Vec<(StatusCode, Bytes)>>,
}

impl ErrorPagesLayer {
    /// No pages.
    pub fn new() -> Self {
        Self::default()
    }

    /// Responses with `status` get `page` as their body (the last page given for a status
    /// wins).
    #[must_use]
    pub fn page(mut self, status: StatusCode, page: Bytes) -> Self {
        let pages = Arc::make_mut(&mut self.pages);
        pages.retain(|(s, _)| *s != status);
        pages.push((status, page));
        self
    }

    /// Whether there are no pages.
    pub fn is_empty(&self) -> bool {
        self.pages.is_empty()
    }
}

impl<S> Layer<S> for ErrorPagesLayer {
    type Service = ErrorPages<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ErrorPages {
            inner,
            pages: Arc::clone(&self.pages),
        }
    }
}

/// Replaces the bodies of error responses; see the [module documentation](self).
#[derive(Clone, Debug)]
pub struct ErrorPages<S> {
    inner: S,
    pages: Arc<Vec<(StatusCode, Bytes)>>,
}

impl<S, B> Service<Request<B>> for ErrorPages<S>
where
    S: Service<Request<B>, Response = Response<Body>>,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let request_id = req.extensions().get::<Id>().cloned();
        let trace_id = req
            .extensions()
            .get::<TraceContext>()
            .map(TraceContext::trace_id);
        ResponseFuture {
            inner: self.inner.call(req),
            pages: Arc::clone(&self.pages),
            request_id,
            trace_id,
        }
    }
}

pin_project! {
    /// Response future of [`ErrorPages`].
    pub struct ResponseFuture<F> {
        #[pin]
        inner: F,
        pages: Arc<Vec<(StatusCode, Bytes)>>,
        request_id: Option<Id>,
        trace_id: Option<[u8; 16]>,
    }
}

impl<F> fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

/// `page` with every `{request_id}` replaced by `id` and every `{trace_id}` by the
/// trace's id in hex (or by nothing).
fn render(page: &Bytes, id: Option<&Id>, trace: Option<&[u8; 16]>) -> Bytes {
    let holds = |placeholder: &[u8]| page.windows(placeholder.len()).any(|w| w == placeholder);
    if !holds(REQUEST_ID) && !holds(TRACE_ID) {
        return page.clone();
    }
    let id = id.map_or(&b""[..], |id| id.as_str().as_bytes());
    let mut out = Vec::with_capacity(page.len() + id.len() + 32);
    let mut rest = &page[..];
    while let Some(at) = rest.iter().position(|&b| b == b'{') {
        out.extend_from_slice(&rest[..at]);
        rest = &rest[at..];
        if rest.starts_with(REQUEST_ID) {
            // A client may send its own id (any visible ASCII): escaped for HTML.
            for &b in id {
                match b {
                    b'&' => out.extend_from_slice(b"&amp;"),
                    b'<' => out.extend_from_slice(b"&lt;"),
                    b'>' => out.extend_from_slice(b"&gt;"),
                    b'"' => out.extend_from_slice(b"&quot;"),
                    b'\'' => out.extend_from_slice(b"&#39;"),
                    _ => out.push(b),
                }
            }
            rest = &rest[REQUEST_ID.len()..];
        } else if rest.starts_with(TRACE_ID) {
            // Hex digits only: nothing to escape.
            for b in trace.into_iter().flatten() {
                out.extend_from_slice(format!("{b:02x}").as_bytes());
            }
            rest = &rest[TRACE_ID.len()..];
        } else {
            out.push(b'{');
            rest = &rest[1..];
        }
    }
    out.extend_from_slice(rest);
    Bytes::from(out)
}

impl<F, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response<Body>, E>>,
{
    type Output = Result<Response<Body>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let mut result = ready!(this.inner.poll(cx));
        if let Ok(res) = &mut result
            && let Some((_, page)) = this.pages.iter().find(|(s, _)| *s == res.status())
        {
            let page = render(page, this.request_id.as_ref(), this.trace_id.as_ref());
            let headers = res.headers_mut();
            headers.remove(header::CONTENT_ENCODING);
            headers.remove(header::CONTENT_RANGE);
            headers.remove(header::ETAG);
            headers.remove(header::LAST_MODIFIED);
            headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/html; charset=utf-8"),
            );
            headers.insert(header::CONTENT_LENGTH, HeaderValue::from(page.len()));
            *res.body_mut() = Body::from(page);
        }
        Poll::Ready(result)
    }
}

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt as _;
    use tower::{ServiceBuilder, ServiceExt as _};

    use super::*;
    use crate::request_id::RequestIdLayer;
    use crate::respond::Respond;

    #[tokio::test]
    async fn pages_replace_bodies_by_status_with_the_request_id() {
        let pages = ErrorPagesLayer::new()
            .page(
                StatusCode::BAD_GATEWAY,
                Bytes::from("<p>down, id {request_id}.</p>"),
            )
            .page(StatusCode::NOT_FOUND, Bytes::from("<p>no</p>"));
        let answer = |status| {
            ServiceBuilder::new()
                .layer(RequestIdLayer::new())
                .layer(pages.clone())
                .service(
                    Respond::new(status)
                        .header(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"))
                        .body("plain"),
                )
        };
        let req = || {
            Request::get("/")
                .header("x-request-id", "rid-3")
                .body(Body::empty())
                .unwrap()
        };
        let res = answer(StatusCode::BAD_GATEWAY)
            .oneshot(req())
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::BAD_GATEWAY);
        assert!(!res.headers().contains_key(header::CONTENT_ENCODING));
        assert_eq!(res.headers()[header::CONTENT_LENGTH], "22");
        let body = res.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(body, "<p>down, id rid-3.</p>");
        let res = answer(StatusCode::OK).oneshot(req()).await.unwrap();
        let body = res.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(body, "plain");
        // A client's own id cannot put markup in the page.
        let hostile = Request::get("/")
            .header("x-request-id", "<script>&\"'")
            .body(Body::empty())
            .unwrap();
        let res = answer(StatusCode::BAD_GATEWAY)
            .oneshot(hostile)
            .await
            .unwrap();
        let body = res.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(body, "<p>down, id &lt;script&gt;&amp;&quot;&#39;.</p>");
    }

    #[tokio::test]
    async fn pages_show_the_trace_id_and_leave_other_braces() {
        let svc = ServiceBuilder::new()
            .layer(crate::spans::SpansLayer::new(|_span| {}).sample_ratio(0.0))
            .layer(ErrorPagesLayer::new().page(
                StatusCode::NOT_FOUND,
                Bytes::from("{trace_id} {x} {request_id}{"),
            ))
            .service(Respond::new(StatusCode::NOT_FOUND));
        let req = Request::get("/")
            .header(
                "traceparent",
                "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00",
            )
            .body(Body::empty())
            .unwrap();
        let res = svc.clone().oneshot(req).await.unwrap();
        let body = res.into_body().collect().await.unwrap().to_bytes();
        // No request id layer: that placeholder is empty.
        assert_eq!(body, "0af7651916cd43dd8448eb211c80319c {x} {");
        // A trace of its own: 32 hex digits all the same.
        let res = svc
            .oneshot(Request::get("/").body(Body::empty()).unwrap())
            .await
            .unwrap();
        let body = res.into_body().collect().await.unwrap().to_bytes();
        let trace = body.split(|&b| b == b' ').next().unwrap();
        assert_eq!(trace.len(), 32);
        assert!(trace.iter().all(u8::is_ascii_hexdigit));
    }
}
