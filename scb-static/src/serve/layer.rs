//! [`ServeStaticLayer`]: files first, the inner service for everything else.
//!
//! A request that names a file beneath the root gets the file; one that does not (missing,
//! hidden, escaping, a directory without an index) or that uses a method files do not
//! answer (a POST) goes to the inner service, unchanged, body included.
//!
//! ```
//! use scb_static::ServeStatic;
//! use tower::{ServiceBuilder, service_fn};
//!
//! # fn main() -> Result<(), scb_static::BuildError> {
//! let files = ServeStatic::new(std::env::temp_dir())?;
//! let app = ServiceBuilder::new()
//!     .layer(files.into_layer())
//!     .service(service_fn(|_req: http::Request<scb_core::Body>| async {
//!         Ok::<_, std::convert::Infallible>(http::Response::new(scb_core::Body::from("api")))
//!     }));
//! # let _ = app;
//! # Ok(())
//! # }
//! ```

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http::{Request, Response};
use pin_project_lite::pin_project;
use scb_core::{Body, BoxError};
use tower::{Layer, Service};

use super::decide::NoFile;
use super::{ResponseFuture as FilesFuture, ServeStatic};

/// Serves files, and hands every request that names none to the inner service.
#[derive(Clone, Debug)]
pub struct ServeStaticLayer {
    files: ServeStatic,
}

impl ServeStaticLayer {
    /// A layer serving `files` in front of the service it wraps. A
    /// [`not_found`](crate::ServeStaticBuilder::not_found) page is not used: requests
    /// that find no file go to the inner service, which answers them its own way.
    pub fn new(mut files: ServeStatic) -> Self {
        // Not even read: the response it would go into is thrown away.
        files.not_found_page = false;
        Self { files }
    }
}

impl ServeStatic {
    /// This service as a [`ServeStaticLayer`]: files first, the wrapped service for the
    /// rest.
    pub fn into_layer(self) -> ServeStaticLayer {
        ServeStaticLayer::new(self)
    }
}

impl<S> Layer<S> for ServeStaticLayer {
    type Service = ServeStaticOr<S>;

    fn layer(&self, inner: S) -> ServeStaticOr<S> {
        ServeStaticOr {
            files: self.files.clone(),
            inner,
        }
    }
}

/// The service of [`ServeStaticLayer`].
#[derive(Clone, Debug)]
pub struct ServeStaticOr<S> {
    files: ServeStatic,
    inner: S,
}

impl<S> ServeStaticOr<S> {
    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The inner service, unwrapped.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S, ReqB, ResB> Service<Request<ReqB>> for ServeStaticOr<S>
where
    S: Service<Request<ReqB>, Response = Response<ResB>> + Clone,
    ResB: http_body::Body<Data = Bytes> + Send + 'static,
    ResB::Error: Into<BoxError>,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = ResponseFuture<S, ReqB>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        // The inner service is readied (on a clone) only if the request goes to it.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        let (parts, body) = req.into_parts();
        // The file service sees the head only; the body stays here for the inner service.
        let head = Request::from_parts(parts.clone(), ());
        let files = Service::<Request<()>>::call(&mut self.files, head);
        ResponseFuture {
            state: State::Files {
                files,
                req: Some(Request::from_parts(parts, body)),
                inner: Some(self.inner.clone()),
            },
        }
    }
}

pin_project! {
    /// The response future of [`ServeStaticOr`].
    pub struct ResponseFuture<S, ReqB>
    where
        S: Service<Request<ReqB>>,
    {
        #[pin]
        state: State<S, ReqB>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<S, ReqB>
    where
        S: Service<Request<ReqB>>,
    {
        Files {
            #[pin]
            files: FilesFuture,
            req: Option<Request<ReqB>>,
            inner: Option<S>,
        },
        Ready {
            req: Option<Request<ReqB>>,
            inner: S,
        },
        Inner {
            #[pin]
            future: S::Future,
        },
    }
}

impl<S, ReqB> std::fmt::Debug for ResponseFuture<S, ReqB>
where
    S: Service<Request<ReqB>>,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("serve_static::layer::ResponseFuture")
    }
}

impl<S, ReqB, ResB> Future for ResponseFuture<S, ReqB>
where
    S: Service<Request<ReqB>, Response = Response<ResB>>,
    ResB: http_body::Body<Data = Bytes> + Send + 'static,
    ResB::Error: Into<BoxError>,
{
    type Output = Result<Response<Body>, S::Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        loop {
            let mut this = self.as_mut().project();
            match this.state.as_mut().project() {
                StateProj::Files { files, req, inner } => {
                    let res: Result<Response<Body>, Infallible> = ready!(files.poll(cx));
                    let Ok(res) = res;
                    if res.extensions().get::<NoFile>().is_none() {
                        return Poll::Ready(Ok(res));
                    }
                    let (Some(req), Some(inner)) = (req.take(), inner.take()) else {
                        return Poll::Ready(Ok(res));
                    };
                    this.state.set(State::Ready {
                        req: Some(req),
                        inner,
                    });
                }
                StateProj::Ready { req, inner } => {
                    ready!(inner.poll_ready(cx))?;
                    let Some(req) = req.take() else {
                        unreachable!("the request is taken once, when the inner service is ready")
                    };
                    let future = inner.call(req);
                    this.state.set(State::Inner { future });
                }
                StateProj::Inner { future } => {
                    let res = ready!(future.poll(cx))?;
                    return Poll::Ready(Ok(res.map(Body::new)));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use http::{Method, StatusCode};
    use http_body_util::BodyExt as _;
    use tower::{ServiceBuilder, ServiceExt as _, service_fn};

    use super::*;

    fn app(
        root: &std::path::Path,
    ) -> ServeStaticOr<
        impl Service<Request<Body>, Response = Response<Body>, Error = Infallible> + Clone,
    > {
        let files = ServeStatic::new(root).unwrap();
        ServiceBuilder::new()
            .layer(files.into_layer())
            .service(service_fn(|req: Request<Body>| async move {
                let method = req.method().clone();
                let body = req.into_body().collect().await.unwrap().to_bytes();
                let text = format!("inner {method} {}", String::from_utf8_lossy(&body));
                Ok::<_, Infallible>(Response::new(Body::from(text)))
            }))
    }

    async fn text(res: Response<Body>) -> String {
        String::from_utf8(res.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap()
    }

    #[tokio::test]
    async fn files_are_served_and_everything_else_falls_through_with_its_body() {
        let dir = std::env::temp_dir().join(format!("scb-layer-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("page.txt"), "a page").unwrap();
        let svc = app(&dir);
        let res = svc
            .clone()
            .oneshot(Request::get("/page.txt").body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::OK);
        assert_eq!(text(res).await, "a page");
        let res = svc
            .clone()
            .oneshot(Request::get("/api/x").body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(text(res).await, "inner GET ");
        let req = Request::builder()
            .method(Method::POST)
            .uri("/page.txt")
            .body(Body::from("posted"))
            .unwrap();
        let res = svc.oneshot(req).await.unwrap();
        assert_eq!(text(res).await, "inner POST posted");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
