//! The response future of a layer that admits a request or refuses it: either the inner
//! service's future, or the layer's own answer (403, 429, 503) ready at once.
//!
//! [`ip_filter`](crate::ip_filter), [`max_concurrent`](crate::max_concurrent) and
//! [`rate_limit`](crate::rate_limit) share it, each naming it as its own
//! `ResponseFuture`. An admitted request may hold something until its future is dropped
//! (`max_concurrent`'s slot); a refusal's answer is built when the layer decides, so the
//! future carries no state of the layer.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::Response;
use pin_project_lite::pin_project;

use crate::Body;

pin_project! {
    /// The inner service's future (with what the admission holds, `G`, until the future
    /// is dropped), or the refusal.
    pub struct ResponseFuture<F, G = ()> {
        #[pin]
        kind: Kind<F, G>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<F, G> {
        Admitted {
            #[pin]
            future: F,
            held: G,
        },
        Refused {
            response: Option<Response<Body>>,
        },
    }
}

impl<F> ResponseFuture<F> {
    /// The inner service answers.
    pub(crate) fn admitted(future: F) -> Self {
        Self::holding(future, ())
    }
}

impl<F, G> ResponseFuture<F, G> {
    /// The inner service answers, and `held` is kept until the future is dropped.
    pub(crate) fn holding(future: F, held: G) -> Self {
        Self {
            kind: Kind::Admitted { future, held },
        }
    }

    /// The layer answers `response`.
    pub(crate) fn refused(response: Response<Body>) -> Self {
        Self {
            kind: Kind::Refused {
                response: Some(response),
            },
        }
    }
}

impl<F, G> fmt::Debug for ResponseFuture<F, G> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match &self.kind {
            Kind::Admitted { .. } => "ResponseFuture::Admitted",
            Kind::Refused { .. } => "ResponseFuture::Refused",
        })
    }
}

impl<F, G, E> Future for ResponseFuture<F, G>
where
    F: Future<Output = Result<Response<Body>, E>>,
{
    type Output = Result<Response<Body>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            KindProj::Admitted { future, .. } => future.poll(cx),
            KindProj::Refused { response } => Poll::Ready(Ok(response
                .take()
                .expect("admission future polled after completion"))),
        }
    }
}
