//! A service that answers every request with the same fixed response.
//!
//! [`Respond`] is the `respond` directive of the config file (health checks, redirects,
//! `403` for a blocked path) and the cheapest possible handler for benchmarks.
//!
//! # Example
//!
//! ```
//! use http::{HeaderValue, Request, StatusCode, header};
//! use http_body_util::BodyExt;
//! use scb_core::{Body, respond::Respond};
//! use tower::ServiceExt;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let svc = Respond::new(StatusCode::OK)
//!     .content_type(HeaderValue::from_static("text/plain; charset=utf-8"))
//!     .header(header::CACHE_CONTROL, HeaderValue::from_static("no-store"))
//!     .body("ok\n");
//!
//! let res = svc.oneshot(Request::new(Body::empty())).await.unwrap();
//! assert_eq!(res.status(), StatusCode::OK);
//! assert_eq!(res.headers()[header::CACHE_CONTROL], "no-store");
//! assert_eq!(res.into_body().collect().await.unwrap().to_bytes(), "ok\n");
//! # }
//! ```

use std::convert::Infallible;
use std::future::{Ready, ready};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Request, Response, StatusCode, header};
use tower::Service;

use crate::Body;

/// Answers every request with a fixed status, headers and body.
///
/// The response parts live behind an `Arc`, so cloning the service (hyper clones it per
/// connection) is a reference-count increment, and the body is [`Bytes`], so each response
/// shares it rather than copying it.
///
/// `Content-Length` is not set: the server derives it from the body's exact size. HEAD is
/// not special-cased either: the server omits the body of a HEAD response while keeping
/// the headers identical to GET.
#[derive(Clone, Debug)]
pub struct Respond {
    parts: Arc<Parts>,
}

/// Room left in each response's header map for headers the layers in front add (the
/// request id, plus a couple such as `Connection` or a CORS header), so that adding them
/// does not grow the map.
///
/// Copying a template `HeaderMap` gives a map whose capacity is its length, so the first
/// header a layer inserted reallocated it: measured at ~1.7k instructions a request.
const LAYER_HEADROOM: usize = 4;

#[derive(Clone, Debug)]
struct Parts {
    status: StatusCode,
    /// In the order they were added; appended one by one into each response's map, which
    /// groups repeated names as `HeaderMap::append` always does.
    headers: Vec<(HeaderName, HeaderValue)>,
    body: Bytes,
}

impl Respond {
    /// The status every response has.
    pub fn status(&self) -> StatusCode {
        self.parts.status
    }

    /// The body every response has.
    pub fn body_bytes(&self) -> &Bytes {
        &self.parts.body
    }

    /// A response with `status`, no headers and an empty body.
    pub fn new(status: StatusCode) -> Self {
        Self {
            parts: Arc::new(Parts {
                status,
                headers: Vec::new(),
                body: Bytes::new(),
            }),
        }
    }

    /// Adds a header. Adding the same name again adds another instance (as for
    /// `Set-Cookie` or `Link`) rather than replacing the first.
    ///
    /// Defaults to no headers.
    pub fn header(mut self, name: HeaderName, value: HeaderValue) -> Self {
        Arc::make_mut(&mut self.parts).headers.push((name, value));
        self
    }

    /// Sets `Content-Type`, replacing any value set before.
    ///
    /// Defaults to no `Content-Type`.
    pub fn content_type(mut self, value: HeaderValue) -> Self {
        let headers = &mut Arc::make_mut(&mut self.parts).headers;
        // As `HeaderMap::insert` did on the old template map: the first instance keeps its
        // place (and so its place on the wire) and takes the value; later instances go.
        let mut value = Some(value);
        headers.retain_mut(|(name, old)| {
            if *name != header::CONTENT_TYPE {
                return true;
            }
            value.take().map(|new| *old = new).is_some()
        });
        if let Some(value) = value {
            headers.push((header::CONTENT_TYPE, value));
        }
        self
    }

    /// Sets the body.
    ///
    /// Defaults to an empty body.
    pub fn body(mut self, body: impl Into<Bytes>) -> Self {
        Arc::make_mut(&mut self.parts).body = body.into();
        self
    }

    fn response(&self) -> Response<Body> {
        let mut res = Response::new(Body::full(self.parts.body.clone()));
        *res.status_mut() = self.parts.status;
        let template = &self.parts.headers;
        let mut headers = HeaderMap::with_capacity(template.len() + LAYER_HEADROOM);
        for (name, value) in template {
            headers.append(name.clone(), value.clone());
        }
        *res.headers_mut() = headers;
        res
    }
}

impl<B> Service<Request<B>> for Respond {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Ready<Result<Response<Body>, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _req: Request<B>) -> Self::Future {
        ready(Ok(self.response()))
    }
}

/// A one-off response with `status` and `text` as a `text/plain; charset=utf-8` body:
/// the shape of every answer scb's services make themselves (404, 403, 502, ...).
pub fn text(status: StatusCode, text: impl Into<Bytes>) -> Response<Body> {
    let mut res = Response::new(Body::from(text.into()));
    *res.status_mut() = status;
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    res
}

/// [`text`] with the status's reason phrase as the body (`Bad Gateway\n`): the one style
/// of every answer scb makes itself, the router's 404, static files' 404 and 405, the
/// proxy's 502 and 504, a panic's 500 (the server's own refusals add `: why` after the
/// reason). The request id is in the response's header, set by
/// [`RequestIdLayer`](crate::request_id::RequestIdLayer) or by the server itself.
pub fn reason(status: StatusCode) -> Response<Body> {
    let reason = status.canonical_reason().unwrap_or("error");
    text(status, format!("{reason}\n"))
}

#[cfg(test)]
mod tests {
    use http::Method;
    use http_body::Body as _;
    use http_body_util::BodyExt as _;
    use tower::{ServiceBuilder, ServiceExt};

    use super::*;
    use crate::request_id::RequestIdLayer;

    async fn body_bytes(res: Response<Body>) -> Bytes {
        res.into_body().collect().await.unwrap().to_bytes()
    }

    #[tokio::test]
    async fn answers_with_status_headers_and_body() {
        let svc = Respond::new(StatusCode::IM_A_TEAPOT)
            .content_type(HeaderValue::from_static("text/plain"))
            .header(header::SET_COOKIE, HeaderValue::from_static("a=1"))
            .header(header::SET_COOKIE, HeaderValue::from_static("b=2"))
            .body("short and stout\n");
        let res = svc.oneshot(Request::new(Body::empty())).await.unwrap();
        assert_eq!(res.status(), StatusCode::IM_A_TEAPOT);
        assert_eq!(res.headers()[header::CONTENT_TYPE], "text/plain");
        let cookies: Vec<_> = res.headers().get_all(header::SET_COOKIE).iter().collect();
        assert_eq!(cookies, ["a=1", "b=2"]);
        assert_eq!(body_bytes(res).await, "short and stout\n");
    }

    #[tokio::test]
    async fn content_type_replaces_an_earlier_one() {
        let svc = Respond::new(StatusCode::OK)
            .content_type(HeaderValue::from_static("text/plain"))
            .content_type(HeaderValue::from_static("application/json"));
        let res = svc.oneshot(Request::new(())).await.unwrap();
        let types: Vec<_> = res.headers().get_all(header::CONTENT_TYPE).iter().collect();
        assert_eq!(types, ["application/json"]);
    }

    #[tokio::test]
    async fn content_type_keeps_its_place_among_the_other_headers() {
        let svc = Respond::new(StatusCode::OK)
            .header(header::CACHE_CONTROL, HeaderValue::from_static("no-store"))
            .content_type(HeaderValue::from_static("text/plain"))
            .header(header::CONTENT_TYPE, HeaderValue::from_static("text/html"))
            .header(header::VARY, HeaderValue::from_static("accept"))
            .content_type(HeaderValue::from_static("application/json"));
        let res = svc.oneshot(Request::new(())).await.unwrap();
        let headers: Vec<_> = res
            .headers()
            .iter()
            .map(|(n, v)| (n.as_str(), v.to_str().unwrap()))
            .collect();
        assert_eq!(
            headers,
            [
                ("cache-control", "no-store"),
                ("content-type", "application/json"),
                ("vary", "accept"),
            ]
        );
    }

    #[tokio::test]
    async fn response_headers_have_room_for_the_layers_in_front() {
        for n in 0..6 {
            let mut svc = Respond::new(StatusCode::OK);
            for i in 0..n {
                let name = HeaderName::try_from(format!("x-h{i}")).unwrap();
                svc = svc.header(name, HeaderValue::from_static("v"));
            }
            let res = svc.oneshot(Request::new(())).await.unwrap();
            assert_eq!(res.headers().len(), n);
            assert!(
                res.headers().capacity() >= n + LAYER_HEADROOM,
                "{n} headers, capacity {}",
                res.headers().capacity()
            );
        }
    }

    #[tokio::test]
    async fn body_has_exact_size_and_no_content_length_header() {
        let svc = Respond::new(StatusCode::OK).body("Hello, world!");
        let res = svc.oneshot(Request::new(())).await.unwrap();
        assert!(!res.headers().contains_key(header::CONTENT_LENGTH));
        assert_eq!(res.body().size_hint().exact(), Some(13));
    }

    #[tokio::test]
    async fn head_gets_the_same_response_as_get() {
        let svc = Respond::new(StatusCode::OK)
            .content_type(HeaderValue::from_static("text/plain"))
            .body("same");
        let head = Request::builder().method(Method::HEAD).body(()).unwrap();
        let res = svc.oneshot(head).await.unwrap();
        assert_eq!(res.headers()[header::CONTENT_TYPE], "text/plain");
        assert_eq!(body_bytes(res).await, "same");
    }

    #[tokio::test]
    async fn default_is_an_empty_body_without_headers() {
        let res = Respond::new(StatusCode::NO_CONTENT)
            .oneshot(Request::new(()))
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::NO_CONTENT);
        assert!(res.headers().is_empty());
        assert!(res.body().is_end_stream());
    }

    #[tokio::test]
    async fn clones_share_parts_and_keep_answering() {
        let svc = Respond::new(StatusCode::OK).body(Bytes::from_static(b"shared"));
        let clone = svc.clone();
        assert!(Arc::ptr_eq(&svc.parts, &clone.parts));
        for s in [svc, clone] {
            let res = s.oneshot(Request::new(())).await.unwrap();
            assert_eq!(body_bytes(res).await, "shared");
        }
    }

    #[tokio::test]
    async fn changing_a_clone_leaves_the_original_alone() {
        let original = Respond::new(StatusCode::OK).body("original");
        let changed = original.clone().body("changed");
        let res = original.oneshot(Request::new(())).await.unwrap();
        assert_eq!(body_bytes(res).await, "original");
        let res = changed.oneshot(Request::new(())).await.unwrap();
        assert_eq!(body_bytes(res).await, "changed");
    }

    #[tokio::test]
    async fn works_under_a_layer_stack() {
        let svc = ServiceBuilder::new()
            .layer(RequestIdLayer::new())
            .service(Respond::new(StatusCode::OK).body("ok"));
        let res = svc.oneshot(Request::new(Body::empty())).await.unwrap();
        assert!(res.headers().contains_key("x-request-id"));
        assert_eq!(body_bytes(res).await, "ok");
    }

    #[test]
    fn is_send_and_sync() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<Respond>();
    }
}
