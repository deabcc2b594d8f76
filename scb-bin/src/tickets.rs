//! The process's TLS session ticket keys: one set for every TLS listener (a ticket from
//! one resumes on another), shared with the fleet under `[cluster]`, and kept by a reload
//! (a client's ticket from before it still resumes after).

use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use scb_core::cluster::Cluster;
use scb_tls::TicketKeys;

/// Keys made for a cluster (its instance's name; `None`: local) and a period.
struct Made {
    owner: Option<String>,
    period: Duration,
    keys: Weak<TicketKeys>,
}

/// The keys made last: reused while a plan holds them.
static LAST: Mutex<Option<Made>> = Mutex::new(None);

/// The ticket keys for a plan: shared through `cluster` when there is one, else local,
/// rotated every `period`; the running plan's when those are the same.
pub(crate) fn keys(cluster: Option<&Cluster>, period: Duration) -> Arc<TicketKeys> {
    let owner = cluster.map(|c| c.instance().to_owned());
    let mut last = LAST.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(made) = last.as_ref()
        && made.owner == owner
        && made.period == period
        && let Some(keys) = made.keys.upgrade()
    {
        return keys;
    }
    let made = match cluster {
        Some(cluster) => TicketKeys::shared(cluster, period),
        None => TicketKeys::local(period),
    };
    // The system's random generator failing is not a config error; no process could
    // serve TLS then.
    let keys = made.expect("random bytes for the ticket keys");
    *last = Some(Made {
        owner,
        period,
        keys: Arc::downgrade(&keys),
    });
    keys
}
