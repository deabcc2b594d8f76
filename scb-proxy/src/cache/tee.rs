//! A response body that goes to the client as it arrives and is stored when it has
//! arrived whole: a body that fails, is cut short, has trailers or grows past the object
//! bound is never stored.
//!
//! "Whole" is known three ways, because not every consumer polls a body to its end:
//! the end polled (`None`); the inner body reporting `is_end_stream` after a data frame
//! (hyper's HTTP/1.1 server and h2 stop there); and, when the body is dropped, exactly the
//! declared `Content-Length` copied (hyper's HTTP/1.1 stops writing, and drops the body,
//! once the declared length is out, even when the body never says it has ended).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http::response::Parts;
use http_body::{Body as HttpBody, Frame, SizeHint};
use scb_core::http1::parse_content_length;
use scb_core::{Body, BoxError};

use super::fill::FillGuard;
use super::key::Key;
use super::key::Source;
use super::policy::Policy;
use super::store::{Entry, Store};
use super::stored::StoredBody;

/// What to store once the body is whole.
#[derive(Debug)]
pub(crate) struct Pending {
    pub(crate) store: Arc<Store>,
    pub(crate) key: Key,
    /// The URL it was fetched for.
    pub(crate) source: Source,
    pub(crate) policy: Policy,
    pub(crate) head: Parts,
    pub(crate) replaces: Option<Arc<Entry>>,
    pub(crate) max_object: usize,
    /// The store's purge generation when the fill began: a purge since means no store.
    pub(crate) generation: u64,
    /// The fill this body ends, if it leads one: dropped (waking the waiters) once the
    /// body is stored, or once it is known that it will not be.
    pub(crate) guard: Option<FillGuard>,
}

/// The body, copied into `buf` on its way to the client.
#[derive(Debug)]
pub(crate) struct Tee {
    inner: Body,
    buf: BytesMut,
    pending: Option<Pending>,
}

impl Tee {
    pub(crate) fn new(inner: Body, pending: Pending) -> Self {
        Self {
            inner,
            buf: BytesMut::new(),
            pending: Some(pending),
        }
    }

    /// The body has arrived whole: what was copied is stored (once).
    fn store(&mut self) {
        if let Some(p) = self.pending.take() {
            let body = StoredBody::store(std::mem::take(&mut self.buf), p.store.sealed());
            p.store.insert_from(
                p.generation,
                p.key,
                Arc::new(Entry::new(p.policy, p.head, body, p.source)),
                p.replaces.as_ref(),
            );
            // Stored before the waiters wake.
            drop(p.guard);
        }
    }
}

impl Drop for Tee {
    fn drop(&mut self) {
        let whole = self.pending.as_ref().is_some_and(|p| {
            p.head
                .headers
                .get(http::header::CONTENT_LENGTH)
                .and_then(|v| parse_content_length(v.as_bytes()))
                .is_some_and(|n| n == self.buf.len() as u64)
        });
        if whole {
            self.store();
        }
    }
}

impl HttpBody for Tee {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        let frame = std::task::ready!(Pin::new(&mut this.inner).poll_frame(cx));
        match &frame {
            Some(Ok(frame)) => match frame.data_ref() {
                Some(data) => {
                    let fits = this
                        .pending
                        .as_ref()
                        .is_some_and(|p| this.buf.len() + data.len() <= p.max_object);
                    if fits {
                        this.buf.extend_from_slice(data);
                        if this.inner.is_end_stream() {
                            this.store();
                        }
                    } else {
                        this.pending = None;
                    }
                }
                // Trailers are not stored: a hit could not send them.
                None => this.pending = None,
            },
            // Failed or cut short: nothing is stored.
            Some(Err(_)) => this.pending = None,
            None => this.store(),
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        // Until it is stored, the end must be polled (or seen after a data frame): an
        // empty body is stored when its `None` is polled.
        self.pending.is_none() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
