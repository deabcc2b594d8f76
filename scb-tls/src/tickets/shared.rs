//! Ticket keys kept in the fleet's Redis: read every few seconds, rotated by the instance
//! that holds `lock:tickets` when the stored set is a period old.

use std::sync::{Arc, RwLock, Weak};
use std::time::Duration;

use scb_core::cluster::Cluster;

use super::{KeySet, NoRandom, TicketKeys, now_ms};

/// The hash the set is stored in, and its field.
const KEY: &str = "tls:tickets";
const FIELD: &str = "set";
/// How long the rotating instance holds the lock: ample for one read and one write.
const LEASE: Duration = Duration::from_secs(30);

impl TicketKeys {
    /// Keys shared by every instance of `cluster`'s fleet, rotated every `period` (at
    /// least a second) by one of them; see the [`tickets`](crate::tickets) module. Until Redis
    /// answers, the keys are this process's own (and then stay readable for a period).
    ///
    /// # Errors
    ///
    /// When the system's random generator fails.
    pub fn shared(cluster: &Cluster, period: Duration) -> Result<Arc<Self>, NoRandom> {
        let keys = Arc::new(Self {
            set: RwLock::new(Arc::new(KeySet::new(now_ms()).ok_or(NoRandom)?)),
            period: period.max(Duration::from_secs(1)),
            shared: true,
        });
        cluster.spawn(watch(cluster.clone(), Arc::downgrade(&keys)));
        Ok(keys)
    }

    /// Reads the stored set, and rotates (or first stores) it when that is due.
    async fn sync(&self, cluster: &Cluster) {
        let Ok(stored) = read(cluster).await else {
            return;
        };
        let now = now_ms();
        if let Some(set) = stored
            && now < set.rotated_ms.saturating_add(self.period_ms())
        {
            self.adopt(set, now);
            return;
        }
        // Missing or a period old: whoever takes the lock writes the next set.
        let Ok(Some(lease)) = cluster.acquire("lock:tickets", LEASE).await else {
            return;
        };
        let next = match read(cluster).await {
            Ok(Some(set)) if now < set.rotated_ms.saturating_add(self.period_ms()) => {
                // Rotated by another instance meanwhile.
                self.adopt(set, now);
                None
            }
            Ok(Some(set)) => set.rotated(now),
            // The first instance of the fleet: its own set becomes everyone's, so the
            // tickets it made already stay good.
            Ok(None) => {
                let ours = self.set();
                KeySet::decode(&ours.encode())
            }
            Err(_) => None,
        };
        if let Some(next) = next {
            let written = lease
                .hset_fenced(KEY, vec![(FIELD.to_owned(), next.encode().into_bytes())])
                .await;
            if matches!(written, Ok(Some(_))) {
                tracing::info!("ticket keys rotated for the cluster");
                self.adopt(next, now);
            }
        }
        lease.release().await;
    }

    /// Takes `set` as the keys, unless it is the one in use; keys of the old set that the
    /// new one lacks still read tickets for a period.
    fn adopt(&self, mut set: KeySet, now: u64) {
        let old = self.set();
        if ids(&old) == ids(&set) && old.current == set.current {
            return;
        }
        let ids = ids(&set);
        let until = now.saturating_add(self.period_ms());
        for key in old
            .keys
            .iter()
            .chain(old.retired.iter().filter(|(_, u)| *u > now).map(|(k, _)| k))
        {
            if !ids.contains(&key.id)
                && let Some(copy) = key.copy()
            {
                set.retired.push((copy, until));
            }
        }
        self.replace(set);
    }
}

fn ids(set: &KeySet) -> Vec<[u8; super::ID_LEN]> {
    set.keys.iter().map(|k| k.id).collect()
}

/// The set stored in the cluster, if any (`Err`: Redis did not answer).
async fn read(cluster: &Cluster) -> Result<Option<KeySet>, scb_core::cluster::ClusterError> {
    let text = cluster.hget("tickets", KEY, FIELD).await?;
    Ok(text.and_then(|t| KeySet::decode(&String::from_utf8_lossy(&t))))
}

/// Syncs `keys` with the cluster until they are dropped: every twelfth of the period,
/// between 100 ms and 5 s.
async fn watch(cluster: Cluster, keys: Weak<TicketKeys>) {
    loop {
        let Some(strong) = keys.upgrade() else {
            return;
        };
        strong.sync(&cluster).await;
        let poll = (strong.period / 12).clamp(Duration::from_millis(100), Duration::from_secs(5));
        drop(strong);
        tokio::time::sleep(poll).await;
    }
}
