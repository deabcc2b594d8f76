//! A `fastcgi` route: its scripts run by the FastCGI servers, the other files beneath its
//! root served as a static route serves them (Caddy's `php_fastcgi` with a file server,
//! nginx's usual `location ~ \.php$` beside `try_files`).
//!
//! Whatever may name a script ([`FastCgi::names_script`]: a script extension in any
//! segment after decoding, a path ending in `/`) goes to FastCGI, which answers 404 unless
//! the script exists: the file server never sees such a path, so a script's source is
//! never sent.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::{Request, Response};
use pin_project_lite::pin_project;
use scb_core::Body;
use scb_proxy::fastcgi::FastCgi;
use scb_static::ServeStatic;
use tower::Service;

/// One worker's service of a `fastcgi` route.
#[derive(Clone, Debug)]
pub(crate) struct ScriptRoute {
    pub(crate) fastcgi: FastCgi,
    pub(crate) files: ServeStatic,
}

impl Service<Request<Body>> for ScriptRoute {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = ScriptFuture;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Body>) -> ScriptFuture {
        if self.fastcgi.names_script(req.uri().path()) {
            ScriptFuture::Script {
                future: self.fastcgi.call(req),
            }
        } else {
            ScriptFuture::File {
                future: self.files.call(req),
            }
        }
    }
}

pin_project! {
    /// Response future of [`ScriptRoute`].
    #[project = ScriptFutureProj]
    pub(crate) enum ScriptFuture {
        Script {
            #[pin]
            future: scb_proxy::fastcgi::ResponseFuture,
        },
        File {
            #[pin]
            future: scb_static::ResponseFuture,
        },
    }
}

impl Future for ScriptFuture {
    type Output = Result<Response<Body>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project() {
            ScriptFutureProj::Script { future } => future.poll(cx),
            ScriptFutureProj::File { future } => future.poll(cx),
        }
    }
}
