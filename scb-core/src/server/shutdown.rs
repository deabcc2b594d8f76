//! Shutdown: one trigger shared by all workers, observed locally by each connection.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::Notify;

/// The cross-thread shutdown trigger. Firing it wakes every worker and every connection
/// waiting on [`fired`](Self::fired); checking it is one atomic load.
#[derive(Clone, Debug, Default)]
pub(crate) struct Trigger {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    fired: AtomicBool,
    notify: Arc<Notify>,
}

impl Trigger {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    pub(crate) fn fire(&self) {
        self.inner.fired.store(true, Ordering::SeqCst);
        self.inner.notify.notify_waiters();
    }

    pub(crate) fn is_fired(&self) -> bool {
        self.inner.fired.load(Ordering::SeqCst)
    }

    /// A future that completes when [`fire`](Self::fire) is called after this call.
    ///
    /// A connection keeps one of these for its whole life, so waiting for shutdown costs no
    /// registration per read. Check [`is_fired`](Self::is_fired) after taking it.
    pub(crate) fn notified(&self) -> tokio::sync::futures::OwnedNotified {
        Arc::clone(&self.inner.notify).notified_owned()
    }

    /// Resolves once [`fire`](Self::fire) has been called (at once if it already was).
    pub(crate) async fn fired(&self) {
        let notified = self.inner.notify.notified();
        if self.is_fired() {
            return;
        }
        notified.await;
    }
}

/// Installs SIGTERM and SIGINT (Ctrl-C) handlers now and returns a future that resolves
/// when either arrives: the usual way to end a [`ServerHandle`] from a binary.
///
/// The handlers are in place when this returns, so a signal sent right after a binary
/// announces its addresses already gets a graceful shutdown, not the default action.
///
/// [`ServerHandle`]: super::ServerHandle
///
/// # Errors
///
/// When the signal handlers cannot be installed.
///
/// # Panics
///
/// When called outside a tokio runtime with its I/O driver enabled.
pub fn shutdown_signal() -> std::io::Result<impl std::future::Future<Output = ()> + Send + 'static>
{
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM received, shutting down"),
            _ = int.recv() => tracing::info!("SIGINT received, shutting down"),
        }
    })
}
