//! [`TicketKeys`]: the keys that encrypt TLS session tickets, one set for every listener
//! of the process, and with a cluster, for every instance of the fleet, so that a client
//! resumes wherever its next connection lands.
//!
//! rustls' own ticketer makes its keys itself and keeps them to itself, so this is
//! written here: a ticket is `id (4 bytes) | nonce (12) | AES-256-GCM-SIV(state) | tag`,
//! the key named by the id, the id authenticated with the state. GCM-SIV rather than
//! GCM: nonces are random, and SIV stays safe if one ever repeats.
//!
//! A set holds three keys, rotated every `period` (6 hours by default, as rustls'):
//! the previous one (decrypts), the current one (encrypts and decrypts) and the next one
//! (decrypts). A ticket is good for one period at least and two at most, which is the
//! lifetime clients are told (one period, the guaranteed part). In a fleet every
//! instance knows the next key a period before any instance encrypts with it, so a
//! ticket made by an instance that rotated first is readable by one that has not yet.
//!
//! Shared ([`TicketKeys::shared`], feature `cluster`): the set lives in Redis under
//! `tls:tickets`. Each instance reads it every few seconds; when it is missing or a
//! period old, the instance that takes the lock `lock:tickets` rotates it (written with
//! the lease's fencing token). An instance that cannot reach Redis goes on with the set
//! it has, and rotates alone once that set is two periods old (its tickets then resume
//! only on itself until Redis is back). The keys are in Redis in the clear: whoever can
//! read that Redis can decrypt recorded sessions' tickets, so it must be private.

use std::fmt;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_lc_rs::aead::{AES_256_GCM_SIV, Aad, NONCE_LEN, Nonce, RandomizedNonceKey};
use rustls::server::ProducesTickets;

/// Bytes of a key id.
const ID_LEN: usize = 4;
/// Bytes of the authentication tag.
const TAG_LEN: usize = 16;
/// The default rotation period: rustls' own.
pub const DEFAULT_PERIOD: Duration = Duration::from_secs(6 * 3600);

/// One key: its id and secret (kept to write it to the cluster) and the cipher.
struct TicketKey {
    id: [u8; ID_LEN],
    secret: [u8; 32],
    cipher: RandomizedNonceKey,
}

impl TicketKey {
    fn random() -> Option<Self> {
        let mut id = [0u8; ID_LEN];
        let mut secret = [0u8; 32];
        aws_lc_rs::rand::fill(&mut id).ok()?;
        aws_lc_rs::rand::fill(&mut secret).ok()?;
        Self::from_parts(id, secret)
    }

    fn from_parts(id: [u8; ID_LEN], secret: [u8; 32]) -> Option<Self> {
        let cipher = RandomizedNonceKey::new(&AES_256_GCM_SIV, &secret).ok()?;
        Some(Self { id, secret, cipher })
    }

    fn copy(&self) -> Option<Self> {
        Self::from_parts(self.id, self.secret)
    }
}

/// A set: previous, current, next (the first may be missing in a new set), and keys kept
/// only to read tickets made before a set was taken from the cluster.
struct KeySet {
    keys: Vec<TicketKey>,
    current: usize,
    /// Milliseconds since the Unix epoch of the last rotation (the fleet's clocks are
    /// taken to agree to within seconds; a period is hours).
    rotated_ms: u64,
    retired: Vec<(TicketKey, u64)>,
}

impl KeySet {
    fn new(now_ms: u64) -> Option<Self> {
        Some(Self {
            keys: vec![TicketKey::random()?, TicketKey::random()?],
            current: 0,
            rotated_ms: now_ms,
            retired: Vec::new(),
        })
    }

    fn current(&self) -> &TicketKey {
        &self.keys[self.current]
    }

    /// The set a rotation at `now_ms` makes: the current key becomes the previous one,
    /// the next one current, and a new next one is made.
    fn rotated(&self, now_ms: u64) -> Option<Self> {
        let current = self.current().copy()?;
        let next = match self.keys.get(self.current + 1) {
            Some(key) => key.copy()?,
            None => TicketKey::random()?,
        };
        Some(Self {
            keys: vec![current, next, TicketKey::random()?],
            current: 1,
            rotated_ms: now_ms,
            retired: Vec::new(),
        })
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The ticket keys of a process; see the [module documentation](self). Give one to every
/// listener ([`TlsSettings::ticket_keys`](crate::TlsSettings::ticket_keys)) so that a
/// ticket from one resumes on all.
pub struct TicketKeys {
    set: RwLock<Arc<KeySet>>,
    period: Duration,
    shared: bool,
}

impl fmt::Debug for TicketKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TicketKeys")
            .field("period", &self.period)
            .field("shared", &self.shared)
            .finish_non_exhaustive()
    }
}

/// Random bytes were not to be had (the system's generator failed).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("no random bytes for ticket keys")]
pub struct NoRandom;

impl TicketKeys {
    /// Keys of this process only, rotated every `period` (at least a second).
    ///
    /// # Errors
    ///
    /// When the system's random generator fails.
    pub fn local(period: Duration) -> Result<Arc<Self>, NoRandom> {
        Ok(Arc::new(Self {
            set: RwLock::new(Arc::new(KeySet::new(now_ms()).ok_or(NoRandom)?)),
            period: period.max(Duration::from_secs(1)),
            shared: false,
        }))
    }

    /// The rotation period.
    pub fn period(&self) -> Duration {
        self.period
    }

    fn set(&self) -> Arc<KeySet> {
        Arc::clone(&self.set.read().unwrap_or_else(PoisonError::into_inner))
    }

    fn period_ms(&self) -> u64 {
        u64::try_from(self.period.as_millis()).unwrap_or(u64::MAX)
    }

    /// Rotates the set when it is due: a period old for local keys, two for shared ones
    /// (whose rotation is the cluster's, unless it has been away that long).
    fn rotate_if_due(&self, set: &KeySet, now: u64) {
        let due = if self.shared {
            2 * self.period_ms()
        } else {
            self.period_ms()
        };
        if now < set.rotated_ms.saturating_add(due) {
            return;
        }
        let mut slot = self.set.write().unwrap_or_else(PoisonError::into_inner);
        // Another thread may have rotated meanwhile.
        if slot.rotated_ms != set.rotated_ms {
            return;
        }
        if let Some(rotated) = slot.rotated(now) {
            if self.shared {
                tracing::warn!("ticket keys rotated locally: the cluster has not for two periods");
            }
            *slot = Arc::new(rotated);
        }
    }
}

impl ProducesTickets for TicketKeys {
    fn enabled(&self) -> bool {
        true
    }

    fn lifetime(&self) -> u32 {
        u32::try_from(self.period.as_secs()).unwrap_or(u32::MAX)
    }

    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        let mut set = self.set();
        let now = now_ms();
        if now >= set.rotated_ms.saturating_add(self.period_ms()) {
            self.rotate_if_due(&set, now);
            set = self.set();
        }
        let key = set.current();
        let mut sealed = Vec::with_capacity(plain.len() + TAG_LEN);
        sealed.extend_from_slice(plain);
        let nonce = key
            .cipher
            .seal_in_place_append_tag(Aad::from(key.id), &mut sealed)
            .ok()?;
        let mut out = Vec::with_capacity(ID_LEN + NONCE_LEN + sealed.len());
        out.extend_from_slice(&key.id);
        out.extend_from_slice(nonce.as_ref());
        out.extend_from_slice(&sealed);
        Some(out)
    }

    fn decrypt(&self, ticket: &[u8]) -> Option<Vec<u8>> {
        if ticket.len() < ID_LEN + NONCE_LEN + TAG_LEN {
            return None;
        }
        let (id, rest) = ticket.split_at(ID_LEN);
        let (nonce, sealed) = rest.split_at(NONCE_LEN);
        let set = self.set();
        let now = now_ms();
        let key = set.keys.iter().find(|k| k.id == id).or_else(|| {
            set.retired
                .iter()
                .find(|(k, until)| k.id == id && *until > now)
                .map(|(k, _)| k)
        })?;
        let mut buf = sealed.to_vec();
        let plain = key
            .cipher
            .open_in_place(
                Nonce::try_assume_unique_for_key(nonce).ok()?,
                Aad::from(key.id),
                &mut buf,
            )
            .ok()?
            .len();
        buf.truncate(plain);
        Some(buf)
    }
}

#[cfg(feature = "cluster")]
mod shared;

#[cfg(test)]
mod tests;
