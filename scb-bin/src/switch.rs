//! A service stack that a config reload replaces while the workers run.
//!
//! [`Switch`] is the process's one copy: the maker of the current stack and its
//! generation. Each worker holds a [`Switched`] built from it. A request costs one atomic
//! load to see whether the generation moved; when it did, the worker builds the new
//! stack once (on its own thread, so per-worker state such as a proxy's connection pool
//! is made where it is used) and every connection of that worker takes it at its next
//! request. A request already called finishes on the stack it started on, which lives
//! as long as something still uses it.
//!
//! Written here rather than taken from a crate: tower's `Steer` and `arc-swap` switch
//! between values that exist up front and are shared across threads, while a worker's
//! stack must be built on the worker and need not be `Send`.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use tower::Service;

/// Builds one worker's stack.
pub(crate) type Maker<S> = Arc<dyn Fn() -> anyhow::Result<S> + Send + Sync>;

/// The current stack's maker, shared by every worker.
pub(crate) struct Switch<S> {
    generation: AtomicU64,
    current: Mutex<(u64, Maker<S>)>,
}

impl<S> Switch<S> {
    /// A switch whose first stack `make` builds.
    pub(crate) fn new(make: Maker<S>) -> Arc<Self> {
        Arc::new(Self {
            generation: AtomicU64::new(0),
            current: Mutex::new((0, make)),
        })
    }

    /// From now on, every worker builds its stack with `make`, once, at its next request.
    pub(crate) fn replace(&self, make: Maker<S>) {
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        let generation = current.0 + 1;
        *current = (generation, make);
        // Published after the maker, under the lock: a worker that sees the new
        // generation finds its maker.
        self.generation.store(generation, Ordering::Release);
    }

    fn current(&self) -> (u64, Maker<S>) {
        let current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        (current.0, Arc::clone(&current.1))
    }
}

impl<S: Clone> Switch<S> {
    /// One worker's handle: call on the worker thread, once (clones serve its
    /// connections).
    ///
    /// # Errors
    ///
    /// When the current maker fails.
    pub(crate) fn worker(self: &Arc<Self>) -> anyhow::Result<Switched<S>> {
        let (generation, make) = self.current();
        let service = make()?;
        Ok(Switched {
            switch: Arc::clone(self),
            slot: Rc::new(Slot {
                generation: Cell::new(generation),
                service: RefCell::new(service.clone()),
            }),
            seen: generation,
            inner: service,
        })
    }
}

/// A worker's current stack, and the generation it was built for.
struct Slot<S> {
    generation: Cell<u64>,
    service: RefCell<S>,
}

/// One worker's view of a [`Switch`]: a service that takes the newest stack before each
/// request.
pub(crate) struct Switched<S> {
    switch: Arc<Switch<S>>,
    slot: Rc<Slot<S>>,
    seen: u64,
    inner: S,
}

impl<S: Clone> Clone for Switched<S> {
    fn clone(&self) -> Self {
        Self {
            switch: Arc::clone(&self.switch),
            slot: Rc::clone(&self.slot),
            seen: self.seen,
            inner: self.inner.clone(),
        }
    }
}

impl<S: Clone> Switched<S> {
    /// Takes the stack of `generation`, building it for this worker if no connection of
    /// the worker has yet.
    fn refresh(&mut self, generation: u64) {
        if self.slot.generation.get() != generation {
            let (built_for, make) = self.switch.current();
            match make() {
                Ok(service) => *self.slot.service.borrow_mut() = service,
                // The reload built the same stack on the main thread before it switched,
                // so this is a resource running out (descriptors, say): keep serving with
                // the stack this worker has.
                Err(e) => tracing::error!("cannot build the reloaded stack on this worker: {e:#}"),
            }
            self.slot.generation.set(built_for);
        }
        self.inner = self.slot.service.borrow().clone();
        self.seen = self.slot.generation.get();
    }
}

impl<S, R> Service<R> for Switched<S>
where
    S: Service<R> + Clone,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        let generation = self.switch.generation.load(Ordering::Acquire);
        if generation != self.seen {
            self.refresh(generation);
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: R) -> Self::Future {
        self.inner.call(req)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use tower::ServiceExt as _;

    use super::*;

    /// Answers with its label; counts how many were built.
    fn labelled(
        label: &'static str,
        built: &Arc<AtomicUsize>,
    ) -> Maker<tower::util::BoxCloneService<(), &'static str, std::convert::Infallible>> {
        let built = Arc::clone(built);
        Arc::new(move || {
            built.fetch_add(1, Ordering::SeqCst);
            Ok(tower::util::BoxCloneService::new(tower::service_fn(
                move |()| async move { Ok(label) },
            )))
        })
    }

    #[tokio::test]
    async fn connections_take_the_new_stack_at_their_next_request_and_build_it_once() {
        let built = Arc::new(AtomicUsize::new(0));
        let switch = Switch::new(labelled("old", &built));
        let worker = switch.worker().unwrap();
        // Two connections of one worker, each with its clone.
        let mut a = worker.clone();
        let mut b = worker.clone();
        assert_eq!(a.ready().await.unwrap().call(()).await.unwrap(), "old");

        // A call made before the switch finishes on the old stack.
        let in_flight = b.ready().await.unwrap().call(());
        switch.replace(labelled("new", &built));
        assert_eq!(in_flight.await.unwrap(), "old");

        assert_eq!(a.ready().await.unwrap().call(()).await.unwrap(), "new");
        assert_eq!(b.ready().await.unwrap().call(()).await.unwrap(), "new");
        let mut c = worker.clone();
        assert_eq!(c.ready().await.unwrap().call(()).await.unwrap(), "new");
        // One build at the start, one for the switch: not one per connection.
        assert_eq!(built.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_maker_that_fails_on_a_worker_keeps_the_stack_it_had() {
        let built = Arc::new(AtomicUsize::new(0));
        let switch = Switch::new(labelled("old", &built));
        let mut svc = switch.worker().unwrap();
        switch.replace(Arc::new(|| anyhow::bail!("out of descriptors")));
        assert_eq!(svc.ready().await.unwrap().call(()).await.unwrap(), "old");
        // The failure is not retried per request; the next replace is taken.
        switch.replace(labelled("newer", &built));
        assert_eq!(svc.ready().await.unwrap().call(()).await.unwrap(), "newer");
    }
}
