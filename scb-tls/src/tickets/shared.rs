//! Ticket keys kept in the fleet's Redis: read every few seconds, rotated by the instance
//! that holds `lock:tickets` when the stored set is a period old.

use std::sync::{Arc, PoisonError, RwLock, Weak};
use std::time::Duration;

use scb_core::cluster::Cluster;

use super::{KeySet, NoRandom, TicketKey, TicketKeys, now_ms};

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

    fn replace(&self, set: KeySet) {
        *self.set.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(set);
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

impl KeySet {
    /// `v1 ROTATED_MS CURRENT ID:SECRET ID:SECRET ...`, hex: what the cluster stores.
    fn encode(&self) -> String {
        let mut out = format!("v1 {} {}", self.rotated_ms, self.current);
        for key in &self.keys {
            out.push(' ');
            out.push_str(&hex(&key.id));
            out.push(':');
            out.push_str(&hex(&key.secret));
        }
        out
    }

    fn decode(text: &str) -> Option<Self> {
        let mut parts = text.split(' ');
        if parts.next()? != "v1" {
            return None;
        }
        let rotated_ms = parts.next()?.parse().ok()?;
        let current: usize = parts.next()?.parse().ok()?;
        let keys = parts
            .map(|part| {
                let (id, secret) = part.split_once(':')?;
                TicketKey::from_parts(unhex(id)?, unhex(secret)?)
            })
            .collect::<Option<Vec<_>>>()?;
        (current < keys.len()).then_some(Self {
            keys,
            current,
            rotated_ms,
            retired: Vec::new(),
        })
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex<const N: usize>(text: &str) -> Option<[u8; N]> {
    if text.len() != 2 * N || !text.is_ascii() {
        return None;
    }
    let mut out = [0u8; N];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, RwLock};
    use std::time::Duration;

    use rustls::server::ProducesTickets as _;

    use super::super::{DEFAULT_PERIOD, KeySet, TicketKeys};

    fn keys_with(set: KeySet, period: Duration) -> TicketKeys {
        TicketKeys {
            set: RwLock::new(Arc::new(set)),
            period,
            shared: false,
        }
    }

    #[test]
    fn a_set_written_and_read_back_reads_the_same_tickets() {
        let set = KeySet::new(1_000).unwrap().rotated(2_000).unwrap();
        let text = set.encode();
        assert!(text.starts_with("v1 2000 1 "), "{text}");
        let a = keys_with(set, DEFAULT_PERIOD);
        let b = keys_with(KeySet::decode(&text).unwrap(), DEFAULT_PERIOD);
        let ticket = a.encrypt(b"state").unwrap();
        assert_eq!(b.decrypt(&ticket).unwrap(), b"state");
        for bad in [
            "",
            "v2 1 0 00000000:00",
            "v1 x 0",
            "v1 1 5 00000000:".to_owned().as_str(),
        ] {
            assert!(KeySet::decode(bad).is_none(), "{bad:?}");
        }
    }
}
