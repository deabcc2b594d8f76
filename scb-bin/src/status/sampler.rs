//! The sampler: a thread that reads the recorder once a second and keeps the figures
//! derived from the samples, for every status page of the process to read.

use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use crate::recorder::MetricsHandle;

use super::history::{Figures, History};
use super::scrape;

/// How often the recorder is read: the chart's resolution and the page's refresh.
const INTERVAL: Duration = Duration::from_secs(1);

/// The latest figures, shared by the sampler and the status pages.
#[derive(Debug, Default)]
pub(crate) struct Sampled {
    figures: Mutex<Arc<Figures>>,
}

impl Sampled {
    /// The figures of the latest sample (all zero before the first).
    pub(super) fn figures(&self) -> Arc<Figures> {
        Arc::clone(&self.figures.lock().unwrap_or_else(PoisonError::into_inner))
    }

    fn set(&self, figures: Figures) {
        *self.figures.lock().unwrap_or_else(PoisonError::into_inner) = Arc::new(figures);
    }
}

/// Starts the sampler on a thread of its own (`scb-status`), reading `handle` now and then
/// every second. The thread holds only a weak reference: it ends at its next tick once
/// the returned handle and every page built on it are gone (a reload that turned the page
/// off).
///
/// # Errors
///
/// When the thread cannot be spawned.
pub(crate) fn start(handle: MetricsHandle) -> std::io::Result<Arc<Sampled>> {
    let sampled = Arc::new(Sampled::default());
    let weak = Arc::downgrade(&sampled);
    std::thread::Builder::new()
        .name("scb-status".into())
        .spawn(move || run(&handle, &weak))?;
    Ok(sampled)
}

fn run(handle: &MetricsHandle, sampled: &Weak<Sampled>) {
    let mut history = History::default();
    let mut next = Instant::now();
    loop {
        let Some(sampled) = sampled.upgrade() else {
            return;
        };
        // A scrape's work, once a second, on this thread: the workers do nothing more
        // for it.
        let totals = scrape::parse(&handle.render());
        history.push(Instant::now(), totals);
        sampled.set(history.figures());
        drop(sampled);
        next += INTERVAL;
        let now = Instant::now();
        // Behind (the process was stopped, say): the next tick is a whole interval away,
        // not a burst of catching up; the rates divide by the real time between samples.
        if next <= now {
            next = now + INTERVAL;
        }
        std::thread::sleep(next - now);
    }
}
