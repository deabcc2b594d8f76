//! The bodies on both sides of the proxy: streamed frame by frame, never buffered whole,
//! with an idle timeout (no frame for that long ends the body with an error) and, for
//! request bodies, a size limit.

use std::future::Future as _;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Frame, SizeHint};
use pin_project_lite::pin_project;
use scb_core::BoxError;
use tokio::time::{Instant, Sleep};

use crate::metrics::ErrorKind;
use crate::upstream::UpstreamState;

/// A body went longer than its idle timeout without a frame.
#[derive(Debug, thiserror::Error)]
#[error("body idle for longer than {0:?}")]
pub(crate) struct IdleTimeout(pub(crate) Duration);

/// A request body passed `max_body`.
#[derive(Debug, thiserror::Error)]
#[error("request body larger than {0} bytes")]
pub(crate) struct TooLarge(pub(crate) u64);

pin_project! {
    /// `inner` with an idle timeout and an optional byte limit.
    pub(crate) struct Guarded<B> {
        #[pin]
        inner: B,
        idle: Duration,
        // Created the first time the body has to wait, and reset when a frame arrives:
        // a body that is ready whenever polled (small responses) never arms a timer.
        sleep: Option<Pin<Box<Sleep>>>,
        // Bytes still allowed; `None` for no limit.
        remaining: Option<u64>,
        limit: u64,
        // For an upstream's response body: whose error counter a failure increments.
        upstream: Option<(Arc<[UpstreamState]>, usize)>,
    }
}

impl<B> Guarded<B> {
    pub(crate) fn new(inner: B, idle: Duration, limit: Option<u64>) -> Self {
        Self {
            inner,
            idle,
            sleep: None,
            remaining: limit,
            limit: limit.unwrap_or(u64::MAX),
            upstream: None,
        }
    }

    /// Counts a failure of this body as a `body` error of `upstreams[index]`.
    pub(crate) fn counted(mut self, upstreams: &Arc<[UpstreamState]>, index: usize) -> Self {
        self.upstream = Some((Arc::clone(upstreams), index));
        self
    }
}

impl<B> http_body::Body for Guarded<B>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let polled = self.as_mut().poll_guarded(cx);
        if let (Poll::Ready(Some(Err(_))), Some((upstreams, index))) = (&polled, &self.upstream) {
            upstreams[*index].metrics.error(ErrorKind::Body);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl<B> Guarded<B>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    fn poll_guarded(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.project();
        match this.inner.poll_frame(cx) {
            Poll::Ready(frame) => {
                if let Some(sleep) = this.sleep.as_mut() {
                    sleep.as_mut().reset(Instant::now() + *this.idle);
                }
                let frame = match frame {
                    Some(Ok(frame)) => frame,
                    Some(Err(e)) => return Poll::Ready(Some(Err(e.into()))),
                    None => return Poll::Ready(None),
                };
                if let (Some(remaining), Some(data)) = (this.remaining.as_mut(), frame.data_ref()) {
                    let len = data.len() as u64;
                    if len > *remaining {
                        return Poll::Ready(Some(Err(TooLarge(*this.limit).into())));
                    }
                    *remaining -= len;
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Pending => {
                let idle = *this.idle;
                let sleep = this
                    .sleep
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(idle)));
                ready!(sleep.as_mut().poll(cx));
                Poll::Ready(Some(Err(IdleTimeout(idle).into())))
            }
        }
    }
}

/// Whether a request body failed, and whether by its size: for HTTP/2 upstreams, whose
/// client sends the body from a task of its own and reports only a reset stream.
#[derive(Debug, Default)]
pub(crate) struct BodyFault(std::sync::atomic::AtomicU8);

impl BodyFault {
    const FAILED: u8 = 1;
    const TOO_LARGE: u8 = 2;

    /// `Some(true)` when the body went over a size limit, `Some(false)` when it failed
    /// otherwise, `None` when it did not fail.
    pub(crate) fn too_large(&self) -> Option<bool> {
        match self.0.load(std::sync::atomic::Ordering::Relaxed) {
            0 => None,
            fault => Some(fault == Self::TOO_LARGE),
        }
    }
}

pin_project! {
    /// `inner`, its failure recorded in a [`BodyFault`].
    pub(crate) struct Watched<B> {
        #[pin]
        inner: B,
        fault: Arc<BodyFault>,
    }
}

impl<B> Watched<B> {
    pub(crate) fn new(inner: B, fault: Arc<BodyFault>) -> Self {
        Self { inner, fault }
    }
}

impl<B> http_body::Body for Watched<B>
where
    B: http_body::Body<Data = Bytes, Error = BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.project();
        let polled = this.inner.poll_frame(cx);
        if let Poll::Ready(Some(Err(e))) = &polled {
            let fault = if too_large(Some(&**e)) {
                BodyFault::TOO_LARGE
            } else {
                BodyFault::FAILED
            };
            this.fault
                .0
                .store(fault, std::sync::atomic::Ordering::Relaxed);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Whether the proxy's own `max_body`, or the server's `max_body_bytes`, is in the chain
/// of `source`.
pub(crate) fn too_large(mut source: Option<&(dyn std::error::Error + 'static)>) -> bool {
    while let Some(err) = source {
        if err.is::<TooLarge>()
            || matches!(
                err.downcast_ref::<scb_core::server::BodyError>(),
                Some(scb_core::server::BodyError::TooLarge)
            )
        {
            return true;
        }
        source = err.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use http_body_util::{BodyExt as _, StreamBody};

    use super::*;

    fn frames(
        chunks: Vec<&'static str>,
    ) -> impl http_body::Body<Data = Bytes, Error = std::convert::Infallible> {
        StreamBody::new(futures_util::stream::iter(
            chunks
                .into_iter()
                .map(|c| Ok(Frame::data(Bytes::from_static(c.as_bytes())))),
        ))
    }

    #[tokio::test]
    async fn a_body_within_its_limit_passes_whole() {
        let body = Guarded::new(frames(vec!["abc", "def"]), Duration::from_secs(1), Some(6));
        assert_eq!(body.collect().await.unwrap().to_bytes(), "abcdef");
    }

    #[tokio::test]
    async fn a_body_over_its_limit_fails() {
        let body = Guarded::new(frames(vec!["abc", "defg"]), Duration::from_secs(1), Some(6));
        let err = body.collect().await.unwrap_err();
        assert!(err.is::<TooLarge>(), "{err}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_stalled_body_fails_after_its_idle_timeout() {
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, BoxError>>(1);
        tx.send(Ok(Frame::data(Bytes::from_static(b"first"))))
            .await
            .unwrap();
        let stream = futures_util::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|item| (item, rx))
        });
        let mut body = Guarded::new(
            StreamBody::new(Box::pin(stream)),
            Duration::from_secs(5),
            None,
        );
        let first = body.frame().await.unwrap().unwrap();
        assert_eq!(first.into_data().unwrap(), "first");
        let started = Instant::now();
        let err = body.frame().await.unwrap().unwrap_err();
        assert!(err.is::<IdleTimeout>(), "{err}");
        assert_eq!(started.elapsed(), Duration::from_secs(5));
        drop(tx);
    }
}
