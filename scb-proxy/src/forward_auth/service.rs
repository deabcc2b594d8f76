//! [`ForwardAuth`]: the service a [`ForwardAuthLayer`](super::ForwardAuthLayer) makes.

use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use scb_core::Body;
use tower::Service;

use super::check::{self, Rules};
use super::future::ResponseFuture;
use crate::service::ReverseProxy;

/// Asks the auth service about each request before the inner service sees it. See the
/// [module documentation](super).
#[derive(Clone, Debug)]
pub struct ForwardAuth<S> {
    inner: S,
    proxy: ReverseProxy,
    rules: Arc<Rules>,
}

impl<S> ForwardAuth<S> {
    pub(super) fn from_parts(inner: S, proxy: ReverseProxy, rules: Arc<Rules>) -> Self {
        Self {
            inner,
            proxy,
            rules,
        }
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Consumes `self`, returning the inner service.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

/// Any request body type: the subrequest has none of its own, and the original's is
/// neither read nor wrapped on its way to the inner service.
impl<S, B> Service<Request<B>> for ForwardAuth<S>
where
    S: Service<Request<B>, Response = Response<Body>> + Clone,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = ResponseFuture<S, B>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        // The proxy is always ready: only the inner service can make a request wait.
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<B>) -> Self::Future {
        let check = check::start(&self.proxy, &self.rules, &mut req);
        // The service `poll_ready` readied goes with the request, to be called once the
        // check passes; `self` keeps a clone, which its next `poll_ready` readies. (A
        // clone taken here instead would be called without ever having been ready.)
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        ResponseFuture::new(check, inner, req)
    }
}
