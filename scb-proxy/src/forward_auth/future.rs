//! [`ResponseFuture`]: the check, then the inner service.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use http::{Request, Response};
use pin_project_lite::pin_project;
use scb_core::Body;
use tower::Service;

use super::check::{Check, Verdict};

pin_project! {
    /// Response future of [`ForwardAuth`](super::ForwardAuth): the auth check, then, if it
    /// passed, the inner service's future.
    ///
    /// It holds the inner service and the request while the check runs, as tower-http's
    /// `AsyncRequireAuthorization` does: the call can only be made once the answer is in.
    pub struct ResponseFuture<S, B>
    where
        S: Service<Request<B>>,
    {
        #[pin]
        state: State<S::Future>,
        // The readied inner service and the request, until the check passes.
        waiting: Option<(S, Request<B>)>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F> {
        Checking { check: Check },
        Inner {
            #[pin]
            future: F,
        },
    }
}

impl<S, B> ResponseFuture<S, B>
where
    S: Service<Request<B>>,
{
    pub(super) fn new(check: Check, inner: S, req: Request<B>) -> Self {
        Self {
            state: State::Checking { check },
            waiting: Some((inner, req)),
        }
    }
}

impl<S, B> fmt::Debug for ResponseFuture<S, B>
where
    S: Service<Request<B>>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match self.state {
            State::Checking { .. } => "checking",
            State::Inner { .. } => "inner",
        };
        f.debug_struct("ResponseFuture")
            .field("state", &state)
            .finish_non_exhaustive()
    }
}

impl<S, B> Future for ResponseFuture<S, B>
where
    S: Service<Request<B>, Response = Response<Body>>,
{
    type Output = Result<Response<Body>, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::Checking { check } => match ready!(check.as_mut().poll(cx)) {
                    // The inner service and the request are dropped with the future.
                    Verdict::Refuse(res) => return Poll::Ready(Ok(res)),
                    Verdict::Pass(fields) => {
                        let (mut inner, mut req) = this
                            .waiting
                            .take()
                            .expect("a check passes once, and its request is still here");
                        let headers = req.headers_mut();
                        for (name, value) in fields {
                            headers.append(name, value);
                        }
                        let future = inner.call(req);
                        this.state.set(State::Inner { future });
                    }
                },
                StateProj::Inner { future } => return future.poll(cx),
            }
        }
    }
}
