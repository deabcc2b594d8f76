//! [`OneOf`]: one of two services with the same response and error, chosen when the stack
//! is built, so that a layer a route or site does not use costs it nothing (no wrapper
//! future, no moves of the request through it).
//!
//! Written here rather than taken from tower: `tower::util::Either` turns both errors
//! into a `BoxError`, and the stack's services are infallible.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;
use tower::Service;

/// The plain service, or the same behind layers.
#[derive(Clone, Debug)]
pub(crate) enum OneOf<A, B> {
    Plain(A),
    Layered(B),
}

impl<A, B, R> Service<R> for OneOf<A, B>
where
    A: Service<R>,
    B: Service<R, Response = A::Response, Error = A::Error>,
{
    type Response = A::Response;
    type Error = A::Error;
    type Future = OneOfFuture<A::Future, B::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), A::Error>> {
        match self {
            Self::Plain(a) => a.poll_ready(cx),
            Self::Layered(b) => b.poll_ready(cx),
        }
    }

    fn call(&mut self, req: R) -> Self::Future {
        match self {
            Self::Plain(a) => OneOfFuture::Plain {
                future: a.call(req),
            },
            Self::Layered(b) => OneOfFuture::Layered {
                future: b.call(req),
            },
        }
    }
}

pin_project! {
    /// Response future of [`OneOf`].
    #[project = OneOfProj]
    pub(crate) enum OneOfFuture<A, B> {
        Plain { #[pin] future: A },
        Layered { #[pin] future: B },
    }
}

impl<A, B> Future for OneOfFuture<A, B>
where
    A: Future,
    B: Future<Output = A::Output>,
{
    type Output = A::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<A::Output> {
        match self.project() {
            OneOfProj::Plain { future } => future.poll(cx),
            OneOfProj::Layered { future } => future.poll(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use tower::ServiceExt as _;
    use tower::service_fn;

    use super::*;

    type Counter = tower::util::BoxService<u32, u32, Infallible>;

    /// `n + 1` plain, `n * 10` layered.
    fn pick(layered: bool) -> OneOf<Counter, Counter> {
        let plain = Counter::new(service_fn(|n: u32| async move { Ok(n + 1) }));
        let tenfold = Counter::new(service_fn(|n: u32| async move { Ok(n * 10) }));
        if layered {
            OneOf::Layered(tenfold)
        } else {
            OneOf::Plain(plain)
        }
    }

    #[tokio::test]
    async fn each_side_answers_as_itself() {
        assert_eq!(pick(false).oneshot(1).await.unwrap(), 2);
        assert_eq!(pick(true).oneshot(1).await.unwrap(), 10);
    }
}
