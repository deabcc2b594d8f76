//! A body that sends several bodies one after another: the parts of a
//! `multipart/byteranges` response, each a part header and a file region.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Frame, SizeHint};
use scb_core::{Body, BoxError};

/// Bodies sent in order, as one.
#[derive(Debug)]
pub(crate) struct Chain {
    parts: VecDeque<Body>,
}

impl Chain {
    pub(crate) fn new(parts: Vec<Body>) -> Self {
        Self {
            parts: parts.into(),
        }
    }
}

impl http_body::Body for Chain {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        while let Some(part) = self.parts.front_mut() {
            match Pin::new(part).poll_frame(cx) {
                Poll::Ready(None) => {
                    self.parts.pop_front();
                }
                other => return other,
            }
        }
        Poll::Ready(None)
    }

    fn is_end_stream(&self) -> bool {
        self.parts.iter().all(http_body::Body::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        let mut hint = SizeHint::new();
        hint.set_lower(self.parts.iter().map(|p| p.size_hint().lower()).sum());
        let upper: Option<u64> = self.parts.iter().map(|p| p.size_hint().upper()).sum();
        if let Some(upper) = upper {
            hint.set_upper(upper);
        }
        hint
    }
}
