//! [`ResponseFuture`] of [`RateLimit`](super::RateLimit): decided at once (admitted or
//! 429), or first waiting for a shared store's answer.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use http::{Request, Response};
use pin_project_lite::pin_project;
use tower::Service;

use super::shared::{SharedUnavailable, TakeFuture, Taken};
use super::{Limits, refusal};
use crate::Body;

pin_project! {
    /// Response future of [`RateLimit`](super::RateLimit).
    pub struct ResponseFuture<S, B>
    where
        S: Service<Request<B>>,
    {
        #[pin]
        state: State<S, B>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<S, B>
    where
        S: Service<Request<B>>,
    {
        Decided {
            #[pin]
            future: crate::admission::ResponseFuture<S::Future>,
        },
        Taking {
            take: TakeFuture,
            // The service readied for this request, the request, and its local key.
            rest: Option<(S, Request<B>, u64, Arc<Limits>)>,
        },
    }
}

impl<S, B> ResponseFuture<S, B>
where
    S: Service<Request<B>>,
{
    pub(super) fn decided(future: crate::admission::ResponseFuture<S::Future>) -> Self {
        Self {
            state: State::Decided { future },
        }
    }

    pub(super) fn taking(
        take: TakeFuture,
        inner: S,
        req: Request<B>,
        key: u64,
        limits: Arc<Limits>,
    ) -> Self {
        Self {
            state: State::Taking {
                take,
                rest: Some((inner, req, key, limits)),
            },
        }
    }
}

impl<S, B> fmt::Debug for ResponseFuture<S, B>
where
    S: Service<Request<B>>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("rate_limit::ResponseFuture")
    }
}

impl<S, B> Future for ResponseFuture<S, B>
where
    S: Service<Request<B>, Response = Response<Body>>,
{
    type Output = Result<Response<Body>, S::Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        loop {
            let mut this = self.as_mut().project();
            let next = match this.state.as_mut().project() {
                StateProj::Decided { future } => return future.poll(cx),
                StateProj::Taking { take, rest } => {
                    let answer: Result<Taken, SharedUnavailable> = ready!(take.as_mut().poll(cx));
                    let (mut inner, req, key, limits) =
                        rest.take().expect("polled after completion");
                    let admitted = limits.after_take(key, answer);
                    let future = match admitted {
                        Ok(()) => crate::admission::ResponseFuture::admitted(inner.call(req)),
                        Err(wait) => crate::admission::ResponseFuture::refused(refusal(wait)),
                    };
                    State::Decided { future }
                }
            };
            this.state.set(next);
        }
    }
}
